// The NCCL checks of dsworker --selftest (see selftest_nccl.h).
#include "selftest_nccl.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "amp/half.h"
#include "comm/nccl_group.h"
#include "comm/store.h"
#include "cuda/launch.h"
#include "device_array.h"

namespace ds {
namespace {

// Rank r's element i: an integer in [-8, 8], so a sum over up to 16 ranks is exact in every type.
float value(int rank, size_t i) { return static_cast<float>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 17) - 8); }

std::vector<uint8_t> encode(DataType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * element_bytes(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DataType::F32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = type == DataType::F16 ? amp::fp16_from_float(values[i]) : amp::bf16_from_float(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> decode(DataType type, const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / element_bytes(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == DataType::F32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = type == DataType::F16 ? amp::fp16_to_float(bits) : amp::bf16_to_float(bits);
    }
  }
  return values;
}

// One rank's part: its input, the collective, and its output's differing elements.
size_t check_rank(const NcclApi& api, std::shared_ptr<Store> store, NcclCollective op, DataType type, size_t count,
                  int rank, int ranks) {
  cuda::set_device(rank);
  auto group = make_nccl_group(api, std::move(store), rank, ranks, "selftest", std::chrono::seconds(60), rank);
  const size_t n = static_cast<size_t>(ranks);
  const size_t in_count = op == NcclCollective::ReduceScatter ? n * count : count;
  const size_t out_count = op == NcclCollective::AllGather ? n * count : count;
  const int root = ranks - 1;
  std::vector<float> input(in_count), expected(out_count, 0.0f);
  for (size_t i = 0; i < in_count; ++i) input[i] = value(rank, i);
  for (size_t i = 0; i < out_count; ++i) switch (op) {
      case NcclCollective::AllReduce:
        for (int q = 0; q < ranks; ++q) expected[i] += value(q, i);
        break;
      case NcclCollective::ReduceScatter:
        for (int q = 0; q < ranks; ++q) expected[i] += value(q, static_cast<size_t>(rank) * count + i);
        break;
      case NcclCollective::AllGather:
        expected[i] = value(static_cast<int>(i / count), i % count);
        break;
      case NcclCollective::Broadcast:
        expected[i] = value(root, i);
        break;
    }
  DeviceArray<uint8_t> in(encode(type, input)), out(std::vector<uint8_t>(out_count * element_bytes(type), 0xff));
  switch (op) {
    case NcclCollective::AllReduce: group->allreduce(in.get(), count, type, ReduceOp::Sum); break;
    case NcclCollective::ReduceScatter: group->reduce_scatter(in.get(), out.get(), count, type, ReduceOp::Sum); break;
    case NcclCollective::AllGather: group->allgather(in.get(), out.get(), count, type); break;
    case NcclCollective::Broadcast: group->broadcast(in.get(), count, type, root); break;
  }
  const bool in_place = op == NcclCollective::AllReduce || op == NcclCollective::Broadcast;
  const std::vector<float> got = decode(type, (in_place ? in : out).to_host());
  size_t differing = 0;
  for (size_t i = 0; i < out_count; ++i) differing += got[i] != expected[i];
  return differing;
}

}  // namespace

const char* collective_name(NcclCollective op) {
  switch (op) {
    case NcclCollective::AllReduce: return "allreduce";
    case NcclCollective::ReduceScatter: return "reduce_scatter";
    case NcclCollective::AllGather: return "allgather";
    case NcclCollective::Broadcast: return "broadcast";
  }
  return "?";
}

size_t nccl_check(const NcclApi& api, NcclCollective op, DataType type, size_t count, int ranks) {
  auto store = make_memory_store();
  std::vector<size_t> differing(static_cast<size_t>(ranks), 0);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        differing[static_cast<size_t>(r)] = check_rank(api, store, op, type, count, r, ranks);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < ranks; ++r)
    if (!errors[static_cast<size_t>(r)].empty())
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[static_cast<size_t>(r)]);
  size_t total = 0;
  for (size_t d : differing) total += d;
  return total;
}

}  // namespace ds
