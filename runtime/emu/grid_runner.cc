#include "runtime/emu/grid_runner.h"

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <span>
#include <tuple>

#include "runtime/emu/emu_math.h"
#include "runtime/emu/fiber.h"
#include "runtime/emu/grid_block.h"
#include "runtime/emu/warp_matrix.h"
#include "runtime/emu/warpgroup.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

constexpr size_t kFiberStackBytes = 256 << 10;
constexpr uint32_t kMaxThreads = 1024;
// Note [emulated memory counters]: ldmatrix sites, apart from access sites.
constexpr uint32_t kLdmatrixSiteBit = 0x80000000u;


}  // namespace


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

[[noreturn]] void Defect(GridRunner::BlockContext& c, const std::string& what) {
  ThreadDefect(c, what);
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
  if (kind & abi::kStore) WarpgroupSharedStore(c, static_cast<size_t>(p - c.shared.data()), bytes);
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
    const uint32_t space_bits = shared ? static_cast<uint32_t>(abi::kSharedSpace) : 0u;
    Record(c, address, bytes, (kind & abi::kAccessMask) | space_bits, site);
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
    .wgmma = &EmuWgmma,
    .warpgroup = &EmuWarpgroup,
    .wgmma_read = &EmuWgmmaRead,
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

}  // namespace

const char* ThreadStateName(ThreadState s) {
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
    case ThreadState::kWgmma:
      return "wgmma";
    case ThreadState::kDone:
      return "exited";
    case ThreadState::kAborted:
      return "stopped";
  }
  return "?";
}

namespace {

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
    if (t.state == ThreadState::kMma || t.state == ThreadState::kLdmatrix ||
        t.state == ThreadState::kWgmma) {
      where = fmt::format("wait at {} #{}", ThreadStateName(t.state), t.site);
    }
    if (where.empty()) where = ThreadStateName(t.state);
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", who, where);
    i = j;
  }
  return out;
}

}  // namespace

GridRunner::BlockContext& CurrentBlock() { return *tls_context; }

void ThreadDefect(GridRunner::BlockContext& c, const std::string& what) {
  c.findings->Add(fmt::format("{}: {}", c.current->id.Describe(), what));
  AbortThread(c);
}

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
  WarpgroupThreadExit(c);
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
                        where, first->lane, what, bit, ThreadStateName(t.state), t.site));
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
    if (ResolveWarpgroups(c)) continue;
    if (c.findings->any()) return;
    if (ResolveBarrier(c)) continue;
    if (c.findings->any()) return;
    c.findings->Add(fmt::format("block {}: deadlock: {}", Coordinates(c.threads[0].id.ctaid),
                                DescribeWaits(c.threads)));
    return;
  }
}

}  // namespace

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
    // Uninitialized shared memory reads as NaN / -1 rather than a lucky zero
    // (a block without any has no storage: memset may not take its null).
    if (!c.shared.empty()) std::memset(c.shared.data(), 0xff, c.shared.size());
    if (l.checks) {
      c.shared_cells.assign((c.shared.size() + kSharedCellBytes - 1) / kSharedCellBytes,
                            SharedCell{0, 0, 0, 0});
    }
    c.threads.resize(threads);
    c.warpgroups.Reset(threads, c.shared.size(), l.warpgroups && l.checks);
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
