#include "runtime/emu/grid_runner.h"

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <span>
#include <tuple>

#include "runtime/emu/emu_math.h"
#include "runtime/emu/fiber.h"
#include "runtime/emu/warp_matrix.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

constexpr uint32_t kWarp = kWarpLanes;
constexpr size_t kFiberStackBytes = 256 << 10;
constexpr uint32_t kMaxThreads = 1024;
// Note [emulated memory counters]: ldmatrix sites, apart from access sites.
constexpr uint32_t kLdmatrixSiteBit = 0x80000000u;

enum class ThreadState : uint8_t {
  kRunnable,
  kBarrier,
  kShuffle,
  kMma,
  kLdmatrix,
  kDone,
  kAborted
};

// One access of a block, for Note [emulated memory counters].
struct AccessRecord {
  uint32_t warp, site, execution, kind;
  uintptr_t address;
  uint32_t bytes;
};

struct EmuThread {
  ThreadIdentity id;
  uint32_t lane = 0, warp = 0;
  ThreadState state = ThreadState::kRunnable;
  uint32_t site = 0;  // of the barrier, shuffle, mma or ldmatrix it waits at
  // shfl.sync operands and result.
  uint32_t mode = 0, mask = 0, value = 0, b = 0, c = 0, result = 0;
  // mma and ldmatrix: the op, the lane's fragments or row address, and where
  // its registers go (on its fiber's stack, which waits).
  uint32_t op = 0;
  const void* in = nullptr;
  void* out = nullptr;
  Fiber fiber;
  // Note [emulated memory counters]: how often it executed each access site
  // and each ldmatrix site, and its accesses in the block, in order.
  std::vector<uint32_t> executions, ldmatrix_executions;
  std::vector<AccessRecord> records;
  // Note [emulated instruction counters]: how often it started each block.
  std::vector<uint32_t> block_starts;
};

// A cell of kSharedCellBytes of shared memory (Note [emulated races]): the
// barrier epoch of the accesses it records (low 32 bits), the one thread
// that made them (+1; 0: none), whether one was a write, whether several
// threads read, and whether the cell was ever written. Two bytes: threads
// storing neighbouring bf16 elements of a tile do not race.
constexpr size_t kSharedCellBytes = 2;
struct SharedCell {
  uint32_t epoch;
  uint16_t thread;  // linear thread + 1
  uint8_t flags;
  uint8_t unused;
};
constexpr uint8_t kWritten = 1, kManyReaders = 2, kInitialized = 4;
static_assert(sizeof(SharedCell) == 8);

}  // namespace

struct GridRunner::BlockContext {
  const Launch* launch = nullptr;
  Findings* findings = nullptr;
  std::unique_ptr<FiberStacks> stacks;
  std::vector<EmuThread> threads;
  EmuThread* current = nullptr;
  std::vector<char> shared;
  std::vector<SharedCell> shared_cells;
  uint32_t epoch = 0;
  bool fibers = false;
  FiberContext scheduler;
  std::jmp_buf escape;  // loop mode: where a failed check ends the thread
  LaunchCounters counters;  // Note [emulated memory counters]: this worker's, over the launch
  // Note [emulated instruction counters]: each block site's mix (the
  // kernel's constant), as its first start reported it.
  std::vector<const uint32_t*> block_mix;
};

namespace {

thread_local GridRunner::BlockContext* tls_context = nullptr;

std::string Coordinates(const uint32_t v[3]) { return fmt::format("({},{},{})", v[0], v[1], v[2]); }

// Ends the running thread after a finding: it never resumes.
[[noreturn]] void AbortThread(GridRunner::BlockContext& c) {
  if (c.fibers) {
    c.current->state = ThreadState::kAborted;
    SwitchFiber(&c.current->fiber.context(), &c.scheduler);
  } else {
    std::longjmp(c.escape, 1);
  }
  __builtin_unreachable();
}

// A defect in the running thread: recorded, and the thread ends.
[[noreturn]] void Defect(GridRunner::BlockContext& c, const std::string& what) {
  c.findings->Add(fmt::format("{}: {}", c.current->id.Describe(), what));
  AbortThread(c);
}

uint32_t SpecialRegister(uint32_t which) {
  GridRunner::BlockContext& c = *tls_context;
  const EmuThread& t = *c.current;
  const Launch& l = *c.launch;
  switch (which) {
    case abi::kTidX:
      return t.id.tid[0];
    case abi::kTidY:
      return t.id.tid[1];
    case abi::kTidZ:
      return t.id.tid[2];
    case abi::kNtidX:
      return l.block.x;
    case abi::kNtidY:
      return l.block.y;
    case abi::kNtidZ:
      return l.block.z;
    case abi::kCtaidX:
      return t.id.ctaid[0];
    case abi::kCtaidY:
      return t.id.ctaid[1];
    case abi::kCtaidZ:
      return t.id.ctaid[2];
    case abi::kNctaidX:
      return l.grid.x;
    case abi::kNctaidY:
      return l.grid.y;
    case abi::kNctaidZ:
      return l.grid.z;
    case abi::kLaneId:
      return t.lane;
    default:
      break;
  }
  Defect(c, fmt::format("special register {} is not emulated (a kernel of another ABI?)", which));
}

void Barrier(uint32_t site) {
  GridRunner::BlockContext& c = *tls_context;
  if (!c.fibers) Defect(c, "a barrier in a kernel the library says has none");
  c.current->state = ThreadState::kBarrier;
  c.current->site = site;
  SwitchFiber(&c.current->fiber.context(), &c.scheduler);
}

uint32_t Shuffle(uint32_t mode, uint32_t mask, uint32_t value, uint32_t b, uint32_t cc,
                 uint32_t site) {
  GridRunner::BlockContext& c = *tls_context;
  if (!c.fibers) Defect(c, "a shuffle in a kernel the library says has none");
  EmuThread& t = *c.current;
  t.state = ThreadState::kShuffle;
  t.site = site, t.mode = mode, t.mask = mask, t.value = value, t.b = b, t.c = cc;
  SwitchFiber(&t.fiber.context(), &c.scheduler);
  return t.result;
}

bool InShared(const GridRunner::BlockContext& c, const void* address) {
  const char* p = static_cast<const char*>(address);
  return p >= c.shared.data() && p < c.shared.data() + c.shared.size();
}

// Bounds, initialization and races of one shared-memory access (Note
// [emulated races]); a defect ends the thread.
void SharedAccess(GridRunner::BlockContext& c, const void* address, uint32_t bytes, uint32_t kind) {
  const char* p = static_cast<const char*>(address);
  const size_t size = c.shared.size();
  if (p < c.shared.data() || p + bytes > c.shared.data() + size) {
    Defect(c, fmt::format("{} of {} bytes at shared offset {} outside the block's {} bytes of "
                          "shared memory",
                          kind & abi::kStore ? "store" : "load", bytes,
                          static_cast<int64_t>(p - c.shared.data()), size));
  }
  if (!c.launch->checks) return;
  const size_t first = static_cast<size_t>(p - c.shared.data()) / kSharedCellBytes;
  const size_t last = (static_cast<size_t>(p - c.shared.data()) + bytes - 1) / kSharedCellBytes;
  const uint16_t me = static_cast<uint16_t>(c.current->id.thread + 1);
  const bool store = (kind & abi::kStore) != 0, load = (kind & abi::kLoad) != 0;
  const bool atomic = (kind & abi::kAtomic) != 0;
  for (size_t w = first; w <= last; ++w) {
    SharedCell& cell = c.shared_cells[w];
    const int64_t offset = static_cast<int64_t>(w * kSharedCellBytes);
    if (load && !(cell.flags & kInitialized)) {
      Defect(c, fmt::format("reads shared memory at offset {} that no thread has written", offset));
    }
    if (atomic) {
      cell.flags |= kInitialized;
      continue;
    }
    if (cell.epoch != c.epoch)
      cell = {c.epoch, 0, static_cast<uint8_t>(cell.flags & kInitialized), 0};
    auto race = [&](const char* what) {
      Defect(c, fmt::format("{} at shared offset {} races with thread {} (no barrier between)",
                            what, offset, cell.thread - 1));
    };
    if (store) {
      if ((cell.thread != 0 && cell.thread != me) || (cell.flags & kManyReaders)) {
        if (cell.flags & kManyReaders) {
          Defect(c, fmt::format("store at shared offset {} races with reads by several threads "
                                "(no barrier between)",
                                offset));
        }
        race(cell.flags & kWritten ? "store after another thread's store"
                                   : "store after another thread's load");
      }
      cell.thread = me;
      cell.flags |= kWritten | kInitialized;
    } else {
      if ((cell.flags & kWritten) && cell.thread != me) race("load of another thread's store");
      if (cell.thread == 0) {
        cell.thread = me;
      } else if (cell.thread != me) {
        cell.flags |= kManyReaders;
      }
    }
  }
}

// Note [emulated memory counters]: the access, for the count at the block's end.
void Record(GridRunner::BlockContext& c, const void* address, uint32_t bytes, uint32_t kind,
            uint32_t site) {
  EmuThread& t = *c.current;
  std::vector<uint32_t>& executions =
      site & kLdmatrixSiteBit ? t.ldmatrix_executions : t.executions;
  const uint32_t index = site & ~kLdmatrixSiteBit;
  if (executions.size() <= index) executions.resize(index + 1, 0);
  t.records.push_back(AccessRecord{.warp = t.warp,
                                   .site = site,
                                   .execution = executions[index]++,
                                   .kind = kind,
                                   .address = reinterpret_cast<uintptr_t>(address),
                                   .bytes = bytes});
}

void Access(const void* address, uint32_t bytes, uint32_t kind, uint32_t site) {
  GridRunner::BlockContext& c = *tls_context;
  const uint32_t space = kind & abi::kSpaceMask;
  const bool shared =
      space == abi::kSharedSpace || (space == abi::kGenericSpace && InShared(c, address));
  if (c.launch->counters != nullptr) {
    Record(c, address, bytes, (kind & abi::kAccessMask) | (shared ? abi::kSharedSpace : 0), site);
  }
  if (shared) {
    SharedAccess(c, address, bytes, kind);
    return;
  }
  GlobalAccessChecker* global = c.launch->global;
  if (global != nullptr && !global->Access(address, bytes, kind, c.current->id, *c.findings)) {
    AbortThread(c);
  }
}

// Note [emulated warp matrix operations]: the lane waits, like at a
// shuffle, until its whole warp is at the same instruction.
void Mma(uint32_t op, const uint32_t* fragments, float* out, uint32_t site) {
  GridRunner::BlockContext& c = *tls_context;
  if (!c.fibers) Defect(c, "an mma in a kernel the library says has none");
  if (MmaName(op).empty()) {
    Defect(c, fmt::format("mma #{}: op {} is not emulated (a kernel of another ABI?)", site, op));
  }
  EmuThread& t = *c.current;
  t.state = ThreadState::kMma;
  t.site = site, t.op = op, t.in = fragments, t.out = out;
  SwitchFiber(&t.fiber.context(), &c.scheduler);
}

// The lane's row is checked as a 16-byte shared load by this lane (bounds,
// initialization, races) before the warp meets; the warp reads it after.
void Ldmatrix(uint32_t op, const void* row, uint32_t* out, uint32_t site) {
  GridRunner::BlockContext& c = *tls_context;
  if (!c.fibers) Defect(c, "an ldmatrix in a kernel the library says has none");
  const uint32_t count = LdmatrixCount(op);
  if (count == 0) {
    Defect(c, fmt::format("ldmatrix #{}: op {:#x} is not emulated (a kernel of another ABI?)", site,
                          op));
  }
  EmuThread& t = *c.current;
  if (t.lane < 8 * count) {
    if (!InShared(c, row)) {
      Defect(c, fmt::format("{} #{}: lane {}'s row address {} is not in the block's shared "
                            "memory",
                            LdmatrixName(op), site, t.lane, row));
    }
    const int64_t offset = static_cast<const char*>(row) - c.shared.data();
    if (offset % 16 != 0) {
      Defect(c, fmt::format("{} #{}: lane {}'s row address, shared offset {}, is not 16-byte "
                            "aligned",
                            LdmatrixName(op), site, t.lane, offset));
    }
    if (c.launch->counters != nullptr) {
      Record(c, row, 16, abi::kLoad | abi::kSharedSpace, kLdmatrixSiteBit | site);
    }
    SharedAccess(c, row, 16, abi::kLoad | abi::kSharedSpace);
  }
  t.state = ThreadState::kLdmatrix;
  t.site = site, t.op = op, t.in = row, t.out = out;
  SwitchFiber(&t.fiber.context(), &c.scheduler);
}

void* SharedMemory() { return tls_context->shared.data(); }

// Note [emulated instruction counters]
void Block(uint32_t site, const uint32_t* mix) {
  GridRunner::BlockContext& c = *tls_context;
  if (c.launch->counters == nullptr) return;
  std::vector<uint32_t>& starts = c.current->block_starts;
  if (starts.size() <= site) starts.resize(site + 1, 0);
  ++starts[site];
  if (c.block_mix.size() <= site) c.block_mix.resize(site + 1, nullptr);
  c.block_mix[site] = mix;
}

const abi::EmuRuntime kTable = {
    .abi_version = abi::kKernelAbiVersion,
    .special_register = &SpecialRegister,
    .barrier = &Barrier,
    .shuffle = &Shuffle,
    .access = &Access,
    .shared_memory = &SharedMemory,
    .math = &DirectedMath,
    .mma = &Mma,
    .ldmatrix = &Ldmatrix,
    .block = &Block,
};

// The source lane of shfl.sync for `lane` (PTX ISA, shfl.sync): out of range
// means the lane keeps its own value.
uint32_t SourceLane(uint32_t mode, uint32_t lane, uint32_t b, uint32_t c) {
  const uint32_t bval = b & 31, cval = c & 31, segmask = (c >> 8) & 31;
  const uint32_t max_lane = (lane & segmask) | (cval & ~segmask);
  const uint32_t min_lane = lane & segmask;
  int64_t j = lane;
  bool in_range = false;
  switch (mode) {
    case abi::kShuffleUp:
      j = static_cast<int64_t>(lane) - bval;
      in_range = j >= static_cast<int64_t>(max_lane);
      break;
    case abi::kShuffleDown:
      j = lane + bval;
      in_range = j <= static_cast<int64_t>(max_lane);
      break;
    case abi::kShuffleBfly:
      j = lane ^ bval;
      in_range = j <= static_cast<int64_t>(max_lane);
      break;
    default:  // idx
      j = min_lane | (bval & ~segmask);
      in_range = j <= static_cast<int64_t>(max_lane);
      break;
  }
  return in_range ? static_cast<uint32_t>(j) : lane;
}

const char* StateName(ThreadState s) {
  switch (s) {
    case ThreadState::kRunnable:
      return "runnable";
    case ThreadState::kBarrier:
      return "barrier";
    case ThreadState::kShuffle:
      return "shuffle";
    case ThreadState::kMma:
      return "mma";
    case ThreadState::kLdmatrix:
      return "ldmatrix";
    case ThreadState::kDone:
      return "exited";
    case ThreadState::kAborted:
      return "stopped";
  }
  return "?";
}

// "threads 0-31 wait at barrier #2; threads 32-47 wait at shuffle #0 (mask
// 0xffffffff); threads 48-63 exited".
std::string DescribeWaits(const std::vector<EmuThread>& threads) {
  std::string out;
  size_t i = 0;
  while (i < threads.size()) {
    const EmuThread& t = threads[i];
    size_t j = i + 1;
    while (j < threads.size() && threads[j].state == t.state && threads[j].site == t.site &&
           (t.state != ThreadState::kShuffle || threads[j].mask == t.mask)) {
      ++j;
    }
    std::string who =
        j - i == 1 ? fmt::format("thread {}", i) : fmt::format("threads {}-{}", i, j - 1);
    std::string where;
    if (t.state == ThreadState::kBarrier) where = fmt::format("wait at barrier #{}", t.site);
    if (t.state == ThreadState::kShuffle) {
      where = fmt::format("wait at shuffle #{} (mask {:#010x})", t.site, t.mask);
    }
    if (t.state == ThreadState::kMma || t.state == ThreadState::kLdmatrix) {
      where = fmt::format("wait at {} #{}", StateName(t.state), t.site);
    }
    if (where.empty()) where = StateName(t.state);
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", who, where);
    i = j;
  }
  return out;
}

}  // namespace

std::string ThreadIdentity::Describe() const {
  return fmt::format("block {} thread {}", Coordinates(ctaid), Coordinates(tid));
}

bool Findings::Add(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!any_.load(std::memory_order_relaxed)) {
    first_ = std::move(message);
    any_.store(true, std::memory_order_release);
  }
  return false;
}

std::string Findings::first() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_;
}

const abi::EmuRuntime* GridRunner::Table() { return &kTable; }

GridRunner::GridRunner(int workers) {
  const int n =
      workers > 0 ? workers : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 0; i < n; ++i) contexts_.push_back(std::make_unique<BlockContext>());
  for (int i = 1; i < n; ++i) threads_.emplace_back([this, i] { Work(i); });
}

GridRunner::~GridRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void GridRunner::Work(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunBlocks(*contexts_[worker]);
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) done_.notify_all();
  }
}

namespace {

// Runs thread `t` of a block without fibers; false when a check stopped it.
bool RunLoopThread(GridRunner::BlockContext& c, EmuThread& t) {
  c.current = &t;
  if (setjmp(c.escape) != 0) return false;
  c.launch->function(c.launch->args.data());
  t.state = ThreadState::kDone;
  return true;
}

void FiberBody(void* arg) {
  auto* t = static_cast<EmuThread*>(arg);
  GridRunner::BlockContext& c = *tls_context;
  c.launch->function(c.launch->args.data());
  t->state = ThreadState::kDone;
  SwitchFiber(&t->fiber.context(), &c.scheduler);
  __builtin_unreachable();
}

// Note [emulated synchronization]: the shuffles that can complete. False
// when none can; a defect is added to the findings.
bool ResolveShuffles(GridRunner::BlockContext& c) {
  std::vector<EmuThread>& threads = c.threads;
  const uint32_t n = static_cast<uint32_t>(threads.size());
  bool progressed = false;
  for (uint32_t base = 0; base < n; base += kWarp) {
    for (uint32_t l = base; l < std::min(n, base + kWarp); ++l) {
      const EmuThread& first = threads[l];
      if (first.state != ThreadState::kShuffle) continue;
      bool ready = true;
      for (uint32_t bit = 0; bit < kWarp && ready; ++bit) {
        if (!(first.mask >> bit & 1)) continue;
        const uint32_t lane = base + bit;
        if (lane >= n) {
          c.findings->Add(fmt::format(
              "{}: shuffle #{} names lane {} of warp {} in its mask {:#010x}, but the block has "
              "{} threads",
              first.id.Describe(), first.site, bit, base / kWarp, first.mask, n));
          return false;
        }
        const EmuThread& other = threads[lane];
        if (other.state == ThreadState::kDone) {
          c.findings->Add(
              fmt::format("{}: shuffle #{} (mask {:#010x}) waits for lane {}, which has exited",
                          first.id.Describe(), first.site, first.mask, bit));
          return false;
        }
        if (other.state != ThreadState::kShuffle) {
          ready = false;
        } else if (other.site != first.site || other.mask != first.mask) {
          c.findings->Add(fmt::format(
              "warp {}: lane {} waits at shuffle #{} (mask {:#010x}), lane {} at shuffle #{} "
              "(mask {:#010x})",
              base / kWarp, first.lane, first.site, first.mask, bit, other.site, other.mask));
          return false;
        }
      }
      if (!ready) continue;
      const uint32_t mask = first.mask;
      for (uint32_t bit = 0; bit < kWarp; ++bit) {
        if (!(mask >> bit & 1)) continue;
        EmuThread& t = threads[base + bit];
        const uint32_t j = SourceLane(t.mode, bit, t.b, t.c);
        if (!(mask >> j & 1)) {
          c.findings->Add(
              fmt::format("{}: shuffle #{} reads lane {}, which is not in the member mask {:#010x}",
                          t.id.Describe(), t.site, j, mask));
          return false;
        }
        t.result = threads[base + j].value;
      }
      for (uint32_t bit = 0; bit < kWarp; ++bit) {
        if (mask >> bit & 1) threads[base + bit].state = ThreadState::kRunnable;
      }
      progressed = true;
    }
  }
  return progressed;
}

// "lanes 0-15, 20" of a lane mask.
std::string Lanes(uint32_t mask) {
  std::string out;
  int count = 0;
  for (uint32_t lane = 0; lane < kWarp;) {
    if (!(mask >> lane & 1)) {
      ++lane;
      continue;
    }
    uint32_t end = lane;
    while (end + 1 < kWarp && (mask >> (end + 1) & 1)) ++end;
    out += (out.empty() ? "" : ", ") +
           (end == lane ? fmt::format("{}", lane) : fmt::format("{}-{}", lane, end));
    count += static_cast<int>(end - lane + 1);
    lane = end + 1;
  }
  return (count == 1 ? "lane " : "lanes ") + out;
}

// Note [emulated synchronization], Note [emulated warp matrix operations]:
// the mma and ldmatrix instructions whose whole warp waits at them. They are
// .aligned: a warp with a lane that exited, waits at another mma or
// ldmatrix, or does not exist (a partial last warp) is a defect. False when
// none completes; a defect is added to the findings.
bool ResolveWarpMatrix(GridRunner::BlockContext& c) {
  std::vector<EmuThread>& threads = c.threads;
  const uint32_t n = static_cast<uint32_t>(threads.size());
  bool progressed = false;
  for (uint32_t base = 0; base < n; base += kWarp) {
    const EmuThread* first = nullptr;
    for (uint32_t l = base; l < std::min(n, base + kWarp) && first == nullptr; ++l) {
      if (threads[l].state == ThreadState::kMma || threads[l].state == ThreadState::kLdmatrix) {
        first = &threads[l];
      }
    }
    if (first == nullptr) continue;
    const bool mma = first->state == ThreadState::kMma;
    const std::string what = fmt::format("{} #{} ({})", mma ? "mma" : "ldmatrix", first->site,
                                         mma ? MmaName(first->op) : LdmatrixName(first->op));
    const std::string where =
        fmt::format("block {} warp {}", Coordinates(first->id.ctaid), base / kWarp);
    if (base + kWarp > n) {
      c.findings->Add(
          fmt::format("{}: {} needs all 32 lanes (.aligned), but the warp has only "
                      "{} threads",
                      where, what, n - base));
      return false;
    }
    uint32_t waiting = 0, exited = 0;
    bool ready = true;
    for (uint32_t bit = 0; bit < kWarp; ++bit) {
      const EmuThread& t = threads[base + bit];
      if (t.state == first->state && t.site == first->site && t.op == first->op) {
        waiting |= 1u << bit;
      } else if (t.state == ThreadState::kDone) {
        exited |= 1u << bit;
      } else if (t.state == ThreadState::kMma || t.state == ThreadState::kLdmatrix) {
        c.findings->Add(
            fmt::format("{}: lane {} waits at {}, lane {} at {} #{} (.aligned: "
                        "every lane must execute the same instruction)",
                        where, first->lane, what, bit, StateName(t.state), t.site));
        return false;
      } else {
        ready = false;  // at a barrier or shuffle: a deadlock unless the block moves on
      }
    }
    if (exited != 0) {
      c.findings->Add(
          fmt::format("{}: {} is .aligned, but {} exited without executing it ({} "
                      "wait at it)",
                      where, what, Lanes(exited), Lanes(waiting)));
      return false;
    }
    if (!ready) continue;
    if (mma) {
      const uint32_t* fragments[kWarp];
      float* d[kWarp];
      for (uint32_t bit = 0; bit < kWarp; ++bit) {
        fragments[bit] = static_cast<const uint32_t*>(threads[base + bit].in);
        d[bit] = static_cast<float*>(threads[base + bit].out);
      }
      WarpMma(first->op, fragments, d);
    } else {
      const char* rows[kWarp];
      uint32_t* out[kWarp];
      for (uint32_t bit = 0; bit < kWarp; ++bit) {
        rows[bit] = static_cast<const char*>(threads[base + bit].in);
        out[bit] = static_cast<uint32_t*>(threads[base + bit].out);
      }
      WarpLdmatrix(first->op, rows, out);
    }
    for (uint32_t bit = 0; bit < kWarp; ++bit) threads[base + bit].state = ThreadState::kRunnable;
    progressed = true;
  }
  return progressed;
}

// Note [emulated synchronization]: passes the barrier when every live
// thread waits at it.
bool ResolveBarrier(GridRunner::BlockContext& c) {
  const EmuThread* waiting = nullptr;
  for (const EmuThread& t : c.threads) {
    if (t.state == ThreadState::kDone) continue;
    if (t.state != ThreadState::kBarrier) return false;
    if (waiting == nullptr) {
      waiting = &t;
    } else if (t.site != waiting->site) {
      c.findings->Add(
          fmt::format("barrier divergence: thread {} waits at barrier #{}, thread {} "
                      "at barrier #{}",
                      waiting->id.thread, waiting->site, t.id.thread, t.site));
      return false;
    }
  }
  if (waiting == nullptr) return false;
  ++c.epoch;
  for (EmuThread& t : c.threads) {
    if (t.state != ThreadState::kBarrier) continue;
    t.state = ThreadState::kRunnable;
    t.id.epoch = c.epoch;
  }
  return true;
}

void RunFiberBlock(GridRunner::BlockContext& c) {
  for (size_t i = 0; i < c.threads.size(); ++i) {
    c.threads[i].fiber.Start(c.stacks->Top(i), &FiberBody, &c.threads[i]);
  }
  for (;;) {
    bool live = false;
    for (EmuThread& t : c.threads) {
      if (t.state != ThreadState::kRunnable) {
        live = live || t.state != ThreadState::kDone;
        continue;
      }
      c.current = &t;
      SwitchFiber(&c.scheduler, &t.fiber.context());
      if (t.state == ThreadState::kAborted || c.findings->any()) return;
      live = live || t.state != ThreadState::kDone;
    }
    if (!live) return;
    if (ResolveShuffles(c)) continue;
    if (c.findings->any()) return;
    if (ResolveWarpMatrix(c)) continue;
    if (c.findings->any()) return;
    if (ResolveBarrier(c)) continue;
    if (c.findings->any()) return;
    c.findings->Add(fmt::format("block {}: deadlock: {}", Coordinates(c.threads[0].id.ctaid),
                                DescribeWaits(c.threads)));
    return;
  }
}

}  // namespace

namespace {

// Note [emulated memory counters]: the distinct 32-byte sectors of the
// lanes' accesses, or the wavefronts of a shared-memory instruction.
uint64_t Sectors(std::span<const AccessRecord> lanes) {
  thread_local std::vector<uintptr_t> sectors;
  sectors.clear();
  for (const AccessRecord& r : lanes) {
    for (uintptr_t s = r.address / 32; s <= (r.address + r.bytes - 1) / 32; ++s) {
      sectors.push_back(s);
    }
  }
  std::sort(sectors.begin(), sectors.end());
  return static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
}

uint64_t Wavefronts(std::span<const AccessRecord> lanes) {
  thread_local std::vector<uintptr_t> words;
  words.clear();
  for (const AccessRecord& r : lanes) {
    for (uintptr_t w = r.address / 4; w <= (r.address + r.bytes - 1) / 4; ++w) words.push_back(w);
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  uint64_t per_bank[32] = {};
  uint64_t most = 0;
  for (uintptr_t w : words) most = std::max(most, ++per_bank[w % 32]);
  return std::max<uint64_t>(most, (words.size() * 4 + 127) / 128);
}

// One warp-level instruction: its lanes' accesses.
void CountInstruction(std::span<const AccessRecord> lanes, LaunchCounters& counters) {
  const bool store = (lanes[0].kind & abi::kStore) != 0;
  if ((lanes[0].kind & abi::kSpaceMask) == abi::kSharedSpace) {
    (store ? counters.shared_store_requests : counters.shared_load_requests) += 1;
    (store ? counters.shared_store_wavefronts : counters.shared_load_wavefronts) +=
        Wavefronts(lanes);
    return;
  }
  uint64_t bytes = 0;
  for (const AccessRecord& r : lanes) bytes += r.bytes;
  (store ? counters.global_store_requests : counters.global_load_requests) += 1;
  (store ? counters.global_store_sectors : counters.global_load_sectors) += Sectors(lanes);
  (store ? counters.global_store_bytes : counters.global_load_bytes) += bytes;
}

bool SameInstruction(const AccessRecord& a, const AccessRecord& b) {
  return a.site == b.site && a.execution == b.execution &&
         (a.kind & (abi::kSpaceMask | abi::kStore)) == (b.kind & (abi::kSpaceMask | abi::kStore));
}

// A hash of what SameInstruction compares.
uint64_t InstructionHash(const AccessRecord& r) {
  const uint64_t kind = r.kind & (abi::kSpaceMask | abi::kStore);
  return ((uint64_t{r.site} * 0x9e3779b97f4a7c15ull) ^ (uint64_t{r.execution} << 8) ^ kind) *
         0xbf58476d1ce4e5b9ull;
}

// Note [emulated memory counters] for one warp, whose lanes' records are
// then cleared. While the lanes made the same accesses in the same order
// (no divergence yet) they pair up by position; the rest is sorted by
// instruction.
void CountWarp(std::span<EmuThread> lanes, LaunchCounters& counters) {
  thread_local std::vector<AccessRecord> group;
  size_t shortest = lanes[0].records.size();
  for (const EmuThread& t : lanes) shortest = std::min(shortest, t.records.size());
  size_t common = 0;
  for (; common < shortest; ++common) {
    const AccessRecord& first = lanes[0].records[common];
    bool same = true;
    for (const EmuThread& t : lanes) same = same && SameInstruction(t.records[common], first);
    if (!same) break;
  }
  for (size_t i = 0; i < common; ++i) {
    group.clear();
    for (const EmuThread& t : lanes) group.push_back(t.records[i]);
    CountInstruction(group, counters);
  }
  group.clear();
  for (const EmuThread& t : lanes) {
    group.insert(group.end(), t.records.begin() + static_cast<std::ptrdiff_t>(common),
                 t.records.end());
  }
  if (!group.empty()) {
    // Grouped by instruction in linear time: an open-addressing table of
    // each instruction's first record gives every record its instruction's
    // number, then a counting sort.
    constexpr uint32_t kEmpty = ~uint32_t{0};
    thread_local std::vector<uint32_t> first, ids, offsets, of;
    thread_local std::vector<AccessRecord> sorted;
    size_t size = 64;
    while (size < 2 * group.size()) size *= 2;
    first.assign(size, kEmpty);
    ids.assign(size, 0);
    offsets.assign(1, 0);
    of.resize(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      size_t h = InstructionHash(group[i]) >> 20 & (size - 1);
      while (first[h] != kEmpty && !SameInstruction(group[first[h]], group[i])) {
        h = (h + 1) & (size - 1);
      }
      if (first[h] == kEmpty) {
        first[h] = static_cast<uint32_t>(i);
        ids[h] = static_cast<uint32_t>(offsets.size() - 1);
        offsets.push_back(0);
      }
      of[i] = ids[h];
      ++offsets[ids[h] + 1];
    }
    for (size_t g = 1; g < offsets.size(); ++g) offsets[g] += offsets[g - 1];
    sorted.resize(group.size());
    std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1);
    for (size_t i = 0; i < group.size(); ++i) sorted[next[of[i]]++] = group[i];
    for (size_t g = 0; g + 1 < offsets.size(); ++g) {
      CountInstruction(
          std::span<const AccessRecord>(sorted.data() + offsets[g], offsets[g + 1] - offsets[g]),
          counters);
    }
  }
  for (EmuThread& t : lanes) t.records.clear();
}

// Note [emulated instruction counters] for one warp, whose lanes' block
// starts are then cleared.
void CountWarpInstructions(std::span<EmuThread> lanes, std::span<const uint32_t* const> mix,
                           LaunchCounters& counters) {
  size_t sites = 0;
  for (const EmuThread& t : lanes) sites = std::max(sites, t.block_starts.size());
  for (size_t s = 0; s < sites; ++s) {
    uint64_t most = 0;
    for (const EmuThread& t : lanes) {
      if (s < t.block_starts.size()) most = std::max<uint64_t>(most, t.block_starts[s]);
    }
    if (most == 0 || s >= mix.size() || mix[s] == nullptr) continue;
    for (uint32_t k = 0; k < abi::kNumInstructionClasses; ++k) {
      counters.instructions[k] += most * mix[s][k];
    }
  }
  for (EmuThread& t : lanes) std::fill(t.block_starts.begin(), t.block_starts.end(), 0);
}

}  // namespace

void LaunchCounters::Add(const LaunchCounters& o) {
  global_load_requests += o.global_load_requests;
  global_load_sectors += o.global_load_sectors;
  global_load_bytes += o.global_load_bytes;
  global_store_requests += o.global_store_requests;
  global_store_sectors += o.global_store_sectors;
  global_store_bytes += o.global_store_bytes;
  shared_load_requests += o.shared_load_requests;
  shared_load_wavefronts += o.shared_load_wavefronts;
  shared_store_requests += o.shared_store_requests;
  shared_store_wavefronts += o.shared_store_wavefronts;
  for (size_t k = 0; k < instructions.size(); ++k) instructions[k] += o.instructions[k];
}

uint64_t LaunchCounters::Instructions() const {
  uint64_t n = 0;
  for (uint64_t k : instructions) n += k;
  return n;
}

void GridRunner::RunBlocks(BlockContext& c) {
  const Launch& l = *launch_;
  tls_context = &c;
  c.launch = &l;
  c.findings = findings_;
  c.fibers = l.uses_sync;
  const uint32_t threads = static_cast<uint32_t>(l.block.count());
  if (c.fibers && (c.stacks == nullptr || c.stacks->count() < threads)) {
    c.stacks = std::make_unique<FiberStacks>(kMaxThreads, kFiberStackBytes);
  }
  c.shared.assign(static_cast<size_t>(l.static_shared) + l.dynamic_shared, '\0');
  const uint64_t blocks = l.grid.count();
  for (uint64_t b; (b = next_block_.fetch_add(1)) < blocks && !findings_->any();) {
    c.epoch = 0;
    // Uninitialized shared memory reads as NaN / -1 rather than a lucky zero.
    std::memset(c.shared.data(), 0xff, c.shared.size());
    if (l.checks) {
      c.shared_cells.assign((c.shared.size() + kSharedCellBytes - 1) / kSharedCellBytes,
                            SharedCell{0, 0, 0, 0});
    }
    c.threads.resize(threads);
    const uint32_t ctaid[3] = {static_cast<uint32_t>(b % l.grid.x),
                               static_cast<uint32_t>(b / l.grid.x % l.grid.y),
                               static_cast<uint32_t>(b / (uint64_t{l.grid.x} * l.grid.y))};
    for (uint32_t i = 0; i < threads; ++i) {
      EmuThread& t = c.threads[i];
      // The counters' per-site tallies keep their storage from block to block.
      std::vector<uint32_t> executions = std::move(t.executions);
      std::vector<uint32_t> ldmatrix_executions = std::move(t.ldmatrix_executions);
      std::vector<AccessRecord> records = std::move(t.records);
      std::vector<uint32_t> block_starts = std::move(t.block_starts);
      t = EmuThread{};
      t.block_starts = std::move(block_starts);
      t.executions = std::move(executions);
      t.ldmatrix_executions = std::move(ldmatrix_executions);
      t.records = std::move(records);
      t.records.clear();
      std::fill(t.executions.begin(), t.executions.end(), 0);
      std::fill(t.ldmatrix_executions.begin(), t.ldmatrix_executions.end(), 0);
      t.id.block = b;
      t.id.thread = i;
      std::memcpy(t.id.ctaid, ctaid, sizeof(ctaid));
      t.id.tid[0] = i % l.block.x;
      t.id.tid[1] = i / l.block.x % l.block.y;
      t.id.tid[2] = i / (l.block.x * l.block.y);
      t.lane = i % kWarp;
      t.warp = i / kWarp;
    }
    if (c.fibers) {
      RunFiberBlock(c);
    } else {
      for (EmuThread& t : c.threads) {
        if (!RunLoopThread(c, t) || findings_->any()) break;
      }
    }
    if (l.counters != nullptr) {
      for (size_t w = 0; w < c.threads.size(); w += kWarp) {
        const std::span<EmuThread> warp(c.threads.data() + w,
                                        std::min<size_t>(kWarp, c.threads.size() - w));
        CountWarp(warp, c.counters);
        CountWarpInstructions(warp, c.block_mix, c.counters);
      }
    }
  }
  tls_context = nullptr;
}

Status GridRunner::Run(const Launch& launch) {
  if (launch.block.count() == 0 || launch.block.count() > kMaxThreads || launch.grid.count() == 0) {
    return Error("kernel {}: grid {}x{}x{} of blocks {}x{}x{}", launch.kernel, launch.grid.x,
                 launch.grid.y, launch.grid.z, launch.block.x, launch.block.y, launch.block.z);
  }
  Findings findings;
  for (auto& c : contexts_) {
    c->counters = LaunchCounters{};
    c->block_mix.clear();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    launch_ = &launch;
    findings_ = &findings;
    next_block_.store(0);
    running_ = launch.ordered ? 0 : static_cast<int>(threads_.size());
    if (!launch.ordered) ++generation_;
  }
  if (!launch.ordered) start_.notify_all();
  RunBlocks(*contexts_[0]);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return running_ == 0; });
    launch_ = nullptr;
    findings_ = nullptr;
  }
  if (findings.any()) return Error("kernel {}: {}", launch.kernel, findings.first());
  if (launch.counters != nullptr) {
    for (const auto& c : contexts_) launch.counters->Add(c->counters);
  }
  return Status::Ok();
}

}  // namespace gptc::rt::emu
