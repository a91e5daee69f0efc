// The emulated device's memory checks (docs/EMULATOR.md, "What it checks").
//
// Note [provenance]
// Every 4-byte word of device memory carries a stamp: the write event that
// last wrote it (0: never written). A write event is one instruction of a
// plan (all its thunks: a scatter-add's two kernels are one event), or one
// copy or memset outside the plan. Every buffer of a plan (Note [plan
// buffers] in compiler/artifact/plan.cc) expects the event of its producer:
// the instruction computing it, the host copy filling an entry input, or
// the all-reduce finishing a gradient. So before a thunk runs, each operand
// it reads must hold exactly its producer's words — anything else is a
// defect the message names: a word never written (an uninitialized read), a
// word another thunk wrote since (two live buffers overlapping in the arena),
// a word still in flight in an all-reduce bucket. When an instruction ends,
// each of its results must be entirely its own writes (else: part of the
// result was left unwritten, e.g. a grid one block short).
//
// Note [stream order]
// Each write event remembers its stream and place there; each stream knows
// how far it has seen every other stream (a vector clock: events it waited
// for, the host's synchronizations before an enqueue). Reading or
// overwriting a word whose writer on another stream is not known to have
// finished is a race between streams (e.g. a load-time cudaMemset on the
// legacy default stream and an upload on a non-blocking stream).
//
// Kernel launches get a GlobalAccessChecker (grid_runner.h) that checks each
// access against the launch's arguments: inside one of them, stores only to
// results, loads of a result only after the instruction wrote them, no
// in-flight bytes, and races between blocks and threads (Note [emulated
// races]).
#ifndef GPTC_RUNTIME_EMU_MEMORY_CHECKER_H_
#define GPTC_RUNTIME_EMU_MEMORY_CHECKER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/gpu/plan_reader.h"

namespace gptc::rt::emu {

// Where an operation runs (Note [stream order]): its stream and that
// stream's vector clock (known[s]: how many ops of stream s it has seen end).
struct StreamPosition {
  int stream = 0;
  const std::vector<uint64_t>* known = nullptr;
};

// The thunk an operation belongs to (the stream's last marker), if any.
struct ThunkContext {
  const gpu::EntryPlan* plan = nullptr;
  int64_t thunk = -1;
  uint32_t event = 0;   // the write event of the thunk's instruction
  bool has_op = false;  // an operation of the thunk ran
  const gpu::Thunk* get() const { return plan != nullptr ? &plan->thunks[thunk] : nullptr; }
};

struct WriteEvent {
  int stream = 0;
  uint64_t clock = 0;  // the op's number on its stream (1-based)
  const gpu::EntryPlan* plan = nullptr;
  int64_t thunk = -1;  // of the instruction's first thunk, or -1
  std::string what;    // what wrote, when not a thunk
};

class MemoryChecker {
 public:
  explicit MemoryChecker(bool checks) : checks_(checks) {}
  ~MemoryChecker();
  MemoryChecker(const MemoryChecker&) = delete;
  MemoryChecker& operator=(const MemoryChecker&) = delete;

  bool checks() const { return checks_; }

  struct Allocation {
    char* base = nullptr;
    size_t size = 0;
    std::string what;
    std::atomic<uint32_t>* stamps = nullptr;  // per word, with checks
  };
  void AddAllocation(char* base, size_t size, std::string what);
  void RemoveAllocation(char* base);
  // The allocation holding [p, p + bytes), or null.
  Allocation* Find(const void* p, size_t bytes);
  // "arena of train_step + 4096" / "host memory 0x7f..".
  std::string Where(const void* p);

  void AddEntry(const gpu::EntryPlan& plan, const char* arena);
  void RemoveEntry(const gpu::EntryPlan& plan);

  uint32_t NewEvent(WriteEvent e);
  // "thunk 12 (kernel fusion_3 for %fusion.3, h.0.attn)" or the event's what.
  std::string DescribeEvent(uint32_t event) const;

  // An operation at `pos` reads [p, p + n) of device memory: initialized,
  // not in flight, its writers ordered before `pos`. `who` leads the error.
  Status CheckRead(const char* p, size_t n, const StreamPosition& pos, const std::string& who);
  // ... writes it as `event`: the previous writers ordered, not in flight;
  // then stamps it (unless `stamp` is false: checking before the write).
  Status Write(const char* p, size_t n, uint32_t event, const StreamPosition& pos,
               const std::string& who, bool stamp = true);
  // The host (a copy out of the plan) reads [p, p + n): CheckRead, and when
  // it is exactly an entry output, that output's producer wrote all of it.
  Status CheckHostRead(const char* p, size_t n, const StreamPosition& pos, const std::string& who);
  // The event's writes happen at `clock` of its stream (its last operation).
  void Touch(uint32_t event, int stream, uint64_t clock);
  // The arena of an entry the checker follows, or null.
  const char* ArenaOf(const gpu::EntryPlan* plan) const;

  // Note [provenance] of thunk ctx's operand `slice` (a buffer of ctx.plan).
  Status CheckOperand(const ThunkContext& ctx, const gpu::ArenaSlice& slice, const char* what,
                      const StreamPosition& pos);
  // The instruction of `ctx` ended: its results hold only its writes; they
  // become what their buffers expect.
  Status FinishInstruction(const ThunkContext& ctx);
  // A thunk that ran no operation (a copy onto itself, an all-reduce of one
  // rank in place): its result is its operand's memory.
  void AliasThunk(const ThunkContext& ctx);
  // The host wrote exactly [p, p + n) as `event`: the entry inputs there
  // now hold it (or, with `any_buffer`, every buffer there: tests that fill
  // an operand directly).
  void HostProduced(const char* p, size_t n, uint32_t event, bool any_buffer);
  // The write that filled [p, p + n) (one event) is what every buffer
  // there expects (EmuDevice::MarkHostWritten).
  void AdoptHostWrite(const char* p, size_t n);
  // Input `slice` of `plan` (a followed entry) holds what was last written
  // there: that write is what it expects.
  void AdoptInPlace(const gpu::EntryPlan& plan, const gpu::ArenaSlice& slice);
  // Whether [p, p + n) is exactly an entry output, and the event it expects.
  bool ExpectedOutput(const char* p, size_t n, uint32_t* event);

  // Note [in-flight all-reduces]: [in, +in_bytes) and [out, +out_bytes) of
  // a bucket member (an all-reduce, reduce-scatter or all-gather) belong to
  // the communication stream until Land: writing either, or reading out, is
  // a defect; `who` names the thunk.
  void BeginFlight(const char* in, size_t in_bytes, const char* out, size_t out_bytes,
                   std::string who);
  void Land(const char* out, uint32_t event, const ThunkContext& ctx);

  // The checker of one kernel launch of thunk `ctx` (args: the pointers),
  // to pass to GridRunner::Run; null without checks.
  std::unique_ptr<GlobalAccessChecker> ForLaunch(const ThunkContext& ctx, uint32_t event,
                                                 const std::vector<uint64_t>& args,
                                                 const StreamPosition& pos);

  // Whether `event` happened before `pos` (same stream, or seen by it).
  bool Ordered(uint32_t event, const StreamPosition& pos) const;

  struct Flight {
    const char* in;
    size_t in_bytes;
    const char* out;
    size_t out_bytes;
    std::string who;
  };
  const std::vector<Flight>& flights() const { return flights_; }

 private:
  friend class LaunchChecker;
  struct Entry {
    const gpu::EntryPlan* plan = nullptr;
    const char* arena = nullptr;
    std::vector<uint32_t> expected;  // by buffer id (Note [provenance])
  };
  Entry* FindEntry(const gpu::EntryPlan* plan);
  const Entry* FindEntry(const gpu::EntryPlan* plan) const;
  // The buffer name of `slice` in `plan`, for messages ("%fusion.3").
  static std::string BufferName(const gpu::EntryPlan& plan, const gpu::ArenaSlice& slice);
  // The words of [p, p + n) whose stamps differ from `event`: the first run
  // of them, for messages.
  std::string DescribeMismatch(const char* p, size_t n, uint32_t event);
  // The words of [p, p + n) stamped `from` become stamped `to`.
  void Restamp(const char* p, size_t n, uint32_t from, uint32_t to);

  bool checks_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Allocation> allocations_;  // by base
  std::vector<Entry> entries_;
  std::vector<WriteEvent> events_ = std::vector<WriteEvent>(1);  // [0]: never written
  std::vector<Flight> flights_;
  // The race cells of the running launch (one launch at a time), reused.
  std::atomic<uint64_t>* LaunchCells(size_t count);
  std::atomic<uint64_t>* cells_ = nullptr;
  size_t cell_capacity_ = 0;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_MEMORY_CHECKER_H_
