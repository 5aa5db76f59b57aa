// TensorBoard event files (see tensorboard.h). The few protobuf fields an Event needs are encoded
// here (tensorflow/core/util/event.proto: Event.wall_time = 1 double, step = 2 int64, file_version = 3
// string, summary = 5; Summary.value = 1; Summary.Value.tag = 1, simple_value = 2 float); CRC-32C comes
// from crcutil.
#include "tensorboard.h"

#include <unistd.h>

#include <bit>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <generic_crc.h>  // crcutil
#include <fmt/format.h>

namespace ds {
namespace {

using Crc32c = crcutil::GenericCrc<crcutil::uint64, crcutil::uint64, crcutil::uint64, 4>;

// TFRecord's checksum: CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), rotated and offset.
uint32_t masked_crc(const std::string& bytes) {
  static const Crc32c crc(0x82f63b78, 32, /*canonical=*/true);
  const auto c = static_cast<uint32_t>(crc.CrcDefault(bytes.data(), bytes.size(), 0));
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7f) | 0x80);
  out += static_cast<char>(v);
}

template <typename T>
void little_endian(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

enum Wire { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void key(std::string& out, int field, Wire wire) { varint(out, static_cast<uint64_t>(field) << 3 | wire); }

void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, kBytes);
  varint(out, bytes.size());
  out += bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event with wall_time and step, and `rest` (its other fields, encoded) after them.
std::string event(int64_t step, const std::string& rest) {
  std::string e;
  key(e, 1, kFixed64);
  little_endian(e, std::bit_cast<uint64_t>(wall_time()));
  key(e, 2, kVarint);
  varint(e, static_cast<uint64_t>(step));
  return e + rest;
}

std::string hostname() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
}

}  // namespace

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("tensorboard: cannot create {}: {}", dir, ec.message()));
  const auto seconds = static_cast<int64_t>(wall_time());
  path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, seconds, hostname());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error(fmt::format("tensorboard: cannot open {} for writing", path_));
  std::string version;
  bytes_field(version, 3, "brain.Event:2");
  record(event(0, version));
  flush();
}

void EventWriter::scalar(const std::string& tag, int64_t step, double value) {
  std::string v;
  bytes_field(v, 1, tag);
  key(v, 2, kFixed32);
  little_endian(v, std::bit_cast<uint32_t>(static_cast<float>(value)));
  std::string summary;
  bytes_field(summary, 1, v);
  std::string rest;
  bytes_field(rest, 5, summary);
  record(event(step, rest));
}

void EventWriter::record(const std::string& e) {
  std::string length;
  little_endian(length, static_cast<uint64_t>(e.size()));
  std::string frame = length;
  little_endian(frame, masked_crc(length));
  frame += e;
  little_endian(frame, masked_crc(e));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
  if (!out_) throw std::runtime_error(fmt::format("tensorboard: cannot write {}", path_));
}

}  // namespace ds
