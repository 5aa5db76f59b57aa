// Shared-memory collectives among the ranks of one host (shm_collectives.h).
//
// The segment: a header, one 64-byte line per rank (its progress flags, written only by that rank),
// then two sets of buffers used by alternate pieces: an input slot per rank and a result slot, each
// kSlotBytes. A piece of a collective is at most one slot's worth of each rank's data; its steps
// are flagged with the piece's sequence number: `written` (my input slot is filled), `reduced` (my
// chunk of the result slot is filled), `copied` (I am done reading this piece's slots). A rank
// reuses a set only after every rank has copied the piece before, so a fast rank runs one piece
// ahead. Waits spin briefly, then sleep on a futex; a rank wakes sleepers only when there are any.
#include "comm/shm_collectives.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds::shm {
namespace {

constexpr uint64_t kMagic = 0x64737275'6e73686dULL;  // "dsrunshm"
constexpr size_t kSlotBytes = 1u << 20;                // per rank and set: the largest piece
constexpr size_t kLineBytes = 64;
// Polls before sleeping (about 50 us, a peer's copy of a small piece) when the ranks have a core
// each; none when they outnumber the cores, where polling only delays the peer being waited for
// (measured at 4 ranks on 2 cores: 1.3x faster without).
constexpr int kSpins = 2000;
enum Flag { kWritten = 0, kReduced = 1, kCopied = 2 };

// A rank's line: flags[3], sleepers (peers asleep on a flag), left (1 once it has gone), pid.
struct Line {
  uint32_t flags[3];
  uint32_t sleepers;
  uint32_t left;
  int32_t pid;
};
static_assert(sizeof(Line) <= kLineBytes);

struct Header {
  uint64_t magic;
  uint32_t size;
  uint32_t slot_bytes;
};

size_t data_offset(int size) { return (kLineBytes * (1 + static_cast<size_t>(size)) + 4095) / 4096 * 4096; }
size_t segment_bytes(int size) { return data_offset(size) + 2 * (static_cast<size_t>(size) + 1) * kSlotBytes; }

std::atomic_ref<uint32_t> word(uint32_t& w) { return std::atomic_ref<uint32_t>(w); }

// A polling loop's pause: lets the core's other thread run and saves power.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
// Sequence numbers wrap: `v` has reached `target` when it is at most 2^31 ahead of it.
bool reached(uint32_t v, uint32_t target) { return static_cast<int32_t>(v - target) >= 0; }

void futex_wait(uint32_t* addr, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{0, static_cast<long>(std::chrono::nanoseconds(slice).count())};
  syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, nullptr, 0);  // shared: no FUTEX_PRIVATE_FLAG
}
void futex_wake(uint32_t* addr) { syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

std::string read_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string stat_id(const char* path) {
  struct stat st{};
  if (::stat(path, &st) != 0) return {};
  return fmt::format("{}:{}", st.st_dev, st.st_ino);
}

}  // namespace

std::string host_identity() {
  const std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  const std::string net = stat_id("/proc/self/ns/net"), pid = stat_id("/proc/self/ns/pid"), dev = stat_id("/dev/shm");
  if (boot.empty() || net.empty() || pid.empty() || dev.empty()) return {};
  return fmt::format("{} net {} pid {} shm {}", boot, net, pid, dev);
}

// A mapping of the segment.
struct Collectives::Segment {
  char* base = nullptr;
  size_t bytes = 0;
  ~Segment() {
    if (base) ::munmap(base, bytes);
  }
  Header& header() const { return *reinterpret_cast<Header*>(base); }
  Line& line(int rank) const { return *reinterpret_cast<Line*>(base + kLineBytes * (1 + static_cast<size_t>(rank))); }

  // Maps the named segment (creating it when `create`); null when that fails.
  static std::unique_ptr<Segment> map(const std::string& name, int size, bool create) {
    const int fd = ::shm_open(name.c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
    if (fd < 0) return nullptr;
    auto s = std::make_unique<Segment>();
    s->bytes = segment_bytes(size);
    // posix_fallocate reserves the pages now, so a full /dev/shm refuses here rather than SIGBUS later.
    const bool sized = !create || (::ftruncate(fd, static_cast<off_t>(s->bytes)) == 0 &&
                                   ::posix_fallocate(fd, 0, static_cast<off_t>(s->bytes)) == 0);
    void* p = sized ? ::mmap(nullptr, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    ::close(fd);
    if (p == MAP_FAILED) {
      if (create) ::shm_unlink(name.c_str());
      return nullptr;
    }
    s->base = static_cast<char*>(p);
    if (create) {
      s->header() = Header{kMagic, static_cast<uint32_t>(size), static_cast<uint32_t>(kSlotBytes)};
    } else if (s->header().magic != kMagic || s->header().size != static_cast<uint32_t>(size) ||
               s->header().slot_bytes != kSlotBytes) {
      return nullptr;
    }
    return s;
  }
};

std::string setting_from_env() {
  const char* env = std::getenv("DS_COMM_SHM");
  const std::string setting = env ? env : "";
  if (!setting.empty() && setting != "0" && setting != "1")
    throw CommError(fmt::format("DS_COMM_SHM: '{}' is not 0 (TCP only) or 1 (the default)", setting));
  return setting;
}

std::unique_ptr<Collectives> Collectives::connect(Store& store, int rank, int size, Millis timeout) {
  if (size < 2) return nullptr;
  const bool off = setting_from_env() == "0";
  const std::string me = off ? std::string() : host_identity();
  store.set(fmt::format("shm/host/{}", rank), me.empty() ? "-" : me);
  // Every rank decides alike from the same keys: one rank elsewhere (or off) sends all to TCP.
  const std::string first = store.get("shm/host/0", timeout);
  bool together = first != "-";
  for (int q = 1; q < size; ++q) together = store.get(fmt::format("shm/host/{}", q), timeout) == first && together;
  if (!together) return nullptr;
  std::unique_ptr<Segment> segment;
  std::string name;
  if (rank == 0) {
    std::random_device random;
    name = fmt::format("/dsrun-{}-{:08x}{:08x}", ::getpid(), random(), random());
    segment = Segment::map(name, size, true);
    store.set("shm/name", segment ? name : "");
  } else {
    name = store.get("shm/name", timeout);
    if (!name.empty()) segment = Segment::map(name, size, false);
  }
  if (segment) segment->line(rank).pid = ::getpid();
  store.set(fmt::format("shm/ok/{}", rank), segment ? "1" : "0");
  bool all = true;
  for (int q = 0; q < size; ++q) all = store.get(fmt::format("shm/ok/{}", q), timeout) == "1" && all;
  if (rank == 0 && segment) ::shm_unlink(name.c_str());  // every rank has it mapped (or gave up): no leftovers
  if (!all) return nullptr;
  return std::unique_ptr<Collectives>(new Collectives(std::move(segment), rank, size));
}

Collectives::Collectives(std::unique_ptr<Segment> segment, int rank, int size)
    : segment_(std::move(segment)), rank_(rank), size_(size) {
  cpu_set_t cpus;
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  spins_ = size <= cores ? kSpins : 0;
}

Collectives::~Collectives() {
  Line& me = segment_->line(rank_);
  word(me.left).store(1);
  for (auto& f : me.flags) futex_wake(&f);
}

char* Collectives::input(uint32_t seq, int rank) const {
  const size_t set = seq % 2;
  return segment_->base + data_offset(size_) + (set * (size_ + 1) + static_cast<size_t>(rank)) * kSlotBytes;
}

char* Collectives::result(uint32_t seq) const { return input(seq, size_); }

uint32_t Collectives::begin_piece(Millis timeout) {
  const uint32_t seq = ++seq_;
  wait_all(kCopied, seq - 2, timeout);  // this set's last user
  return seq;
}

void Collectives::publish(int flag, uint32_t seq) {
  Line& me = segment_->line(rank_);
  word(me.flags[flag]).store(seq);  // sequentially consistent with the sleepers count (Dekker)
  if (word(me.sleepers).load() != 0) futex_wake(&me.flags[flag]);
}

void Collectives::wait_for(int peer, int flag, uint32_t seq, Millis timeout) {
  Line& line = segment_->line(peer);
  auto value = word(line.flags[flag]);
  for (int i = 0; i < spins_; ++i) {
    if (reached(value.load(std::memory_order_acquire), seq)) return;
    cpu_relax();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    word(line.sleepers).fetch_add(1);
    const uint32_t v = value.load();
    if (!reached(v, seq)) futex_wait(&line.flags[flag], v, std::chrono::milliseconds(20));
    word(line.sleepers).fetch_sub(1);
    if (reached(value.load(std::memory_order_acquire), seq)) return;
    if (word(line.left).load())
      throw std::runtime_error(fmt::format("rank {} left the group (shared memory)", peer));
    if (::kill(line.pid, 0) != 0 && errno == ESRCH)
      throw std::runtime_error(fmt::format("rank {} (pid {}) exited (shared memory)", peer, line.pid));
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(
          fmt::format("no progress from rank {} within {} ms (shared memory)", peer, timeout.count()));
  }
}

void Collectives::reduce_own_chunk(void* out, uint32_t seq, size_t at, size_t count, ring::ReduceFn reduce) const {
  const int n = size_, r = rank_;
  auto part = [&](int k) { return input(seq, (r + k) % n) + at; };
  reduce(out, part(1), n == 2 ? part(0) : part(2), count);
  for (int k = 3; k <= n; ++k) reduce(out, out, part(k % n), count);
}

void Collectives::wait_all(int flag, uint32_t seq, Millis timeout) {
  for (int q = 0; q < size_; ++q)
    if (q != rank_) wait_for(q, flag, seq, timeout);
}

size_t Collectives::allreduce(void* data, const ring::Layout& chunks, size_t elem, ring::ReduceFn reduce,
                              const FinishFn& finish, Millis timeout) {
  const int n = size_, r = rank_;
  auto* d = static_cast<char*>(data);
  const size_t most = *std::max_element(chunks.count.begin(), chunks.count.end());
  // A piece holds elements [first, first + seg) of every chunk; chunk i's part sits at i·seg.
  const size_t seg = std::max<size_t>(1, kSlotBytes / (static_cast<size_t>(n) * elem));
  auto count = [&](size_t first, int i) {
    return chunks.count[i] > first ? std::min(seg, chunks.count[i] - first) : 0;
  };
  auto at = [&](size_t first, int i) { return d + (chunks.offset[i] + first) * elem; };
  // Copies piece `seq` out, each chunk once its reducer has flagged it, own chunk first.
  auto copy_out = [&](size_t first, uint32_t seq) {
    for (int k = 0; k < n; ++k) {
      const int i = (r + k) % n;
      if (k) wait_for(i, kReduced, seq, timeout);
      std::memcpy(at(first, i), result(seq) + i * seg * elem, count(first, i) * elem);
    }
    publish(kCopied, seq);
  };
  // Pipelined by one piece: piece s is copied out after piece s+1 is reduced, so a rank waits on
  // its peers' reductions only after doing the next piece's work.
  bool pending = false;
  size_t pending_first = 0;
  uint32_t pending_seq = 0;
  for (size_t first = 0; first < most; first += seg) {
    const uint32_t seq = begin_piece(timeout);
    char* in = input(seq, r);
    for (int i = 0; i < n; ++i) std::memcpy(in + i * seg * elem, at(first, i), count(first, i) * elem);
    publish(kWritten, seq);
    wait_all(kWritten, seq, timeout);
    if (const size_t c = count(first, r)) {
      char* out = result(seq) + r * seg * elem;
      reduce_own_chunk(out, seq, r * seg * elem, c, reduce);
      if (finish) finish(out, c);
    }
    publish(kReduced, seq);
    if (pending) copy_out(pending_first, pending_seq);
    pending = true;
    pending_first = first;
    pending_seq = seq;
  }
  if (pending) copy_out(pending_first, pending_seq);
  const size_t total = chunks.offset.back() + chunks.count.back();
  return (total - chunks.count[r] + (n - 1) * chunks.count[r]) * elem;
}

size_t Collectives::reduce_scatter(const void* in_data, void* out_data, const ring::Layout& chunks, size_t elem,
                                   ring::ReduceFn reduce, Millis timeout) {
  const int n = size_, r = rank_;
  const auto* src = static_cast<const char*>(in_data);
  auto* dst = static_cast<char*>(out_data);
  const size_t most = *std::max_element(chunks.count.begin(), chunks.count.end());
  const size_t seg = std::max<size_t>(1, kSlotBytes / (static_cast<size_t>(n) * elem));
  for (size_t first = 0; first < most; first += seg) {
    auto count = [&](int i) { return chunks.count[i] > first ? std::min(seg, chunks.count[i] - first) : 0; };
    const uint32_t seq = begin_piece(timeout);
    char* in = input(seq, r);
    for (int i = 0; i < n; ++i) std::memcpy(in + i * seg * elem, src + (chunks.offset[i] + first) * elem, count(i) * elem);
    publish(kWritten, seq);
    wait_all(kWritten, seq, timeout);
    // out may be this rank's own chunk of the input: the sum reads the slots only.
    if (const size_t c = count(r)) reduce_own_chunk(dst + first * elem, seq, r * seg * elem, c, reduce);
    publish(kCopied, seq);
  }
  const size_t total = chunks.offset.back() + chunks.count.back();
  return (total - chunks.count[r]) * elem;
}

size_t Collectives::allgather(void* data, const ring::Layout& chunks, size_t elem, Millis timeout) {
  const int n = size_, r = rank_;
  auto* d = static_cast<char*>(data);
  const size_t most = *std::max_element(chunks.count.begin(), chunks.count.end());
  const size_t seg = std::max<size_t>(1, kSlotBytes / elem);
  for (size_t first = 0; first < most; first += seg) {
    auto count = [&](int i) { return chunks.count[i] > first ? std::min(seg, chunks.count[i] - first) : 0; };
    auto at = [&](int i) { return d + (chunks.offset[i] + first) * elem; };
    const uint32_t seq = begin_piece(timeout);
    std::memcpy(input(seq, r), at(r), count(r) * elem);
    publish(kWritten, seq);
    for (int k = 1; k < n; ++k) {  // the next rank's first: each rank starts reading a different slot
      const int q = (r + k) % n;
      wait_for(q, kWritten, seq, timeout);
      std::memcpy(at(q), input(seq, q), count(q) * elem);
    }
    publish(kCopied, seq);
  }
  return (n - 1) * chunks.count[r] * elem;
}

size_t Collectives::broadcast(void* data, size_t bytes, int root, Millis timeout) {
  auto* d = static_cast<char*>(data);
  for (size_t first = 0; first < bytes; first += kSlotBytes) {
    const size_t c = std::min(kSlotBytes, bytes - first);
    const uint32_t seq = begin_piece(timeout);
    if (rank_ == root) {
      std::memcpy(input(seq, root), d + first, c);
      publish(kWritten, seq);
    } else {
      wait_for(root, kWritten, seq, timeout);
      std::memcpy(d + first, input(seq, root), c);
    }
    publish(kCopied, seq);
  }
  return rank_ == root ? (size_ - 1) * bytes : 0;
}

}  // namespace ds::shm
