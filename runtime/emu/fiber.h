// Fibers: the threads of one emulated block, run one at a time on one host
// thread, switching only where the kernel waits for the others (a barrier, a
// warp shuffle). A hand-written context switch (callee-saved registers,
// stack pointer, the SSE and x87 control words: about 20 instructions), as
// ucontext's swapcontext makes a system call per switch.
//
//   FiberStacks stacks(threads, 256 << 10);
//   Fiber f;
//   f.Start(stacks.Top(i), &Body, &data);   // Body(data) runs on its own stack
//   f.SwitchFrom(scheduler);                 // runs until Body switches back
//
// A fiber's body must never return: it ends by switching away for good.
#ifndef GPTC_RUNTIME_EMU_FIBER_H_
#define GPTC_RUNTIME_EMU_FIBER_H_

#include <cstddef>
#include <cstdint>

namespace gptc::rt::emu {

// A suspended execution: its saved stack pointer (everything else lives on
// that stack).
struct FiberContext {
  void* sp = nullptr;
};

// Saves the running execution into `from` and resumes `to`.
void SwitchFiber(FiberContext* from, FiberContext* to);

class Fiber {
 public:
  using Body = void (*)(void* arg);
  // Prepares `body(arg)` to run on the stack ending at `stack_top` (16-byte
  // aligned) at the first switch to it.
  void Start(char* stack_top, Body body, void* arg);
  FiberContext& context() { return context_; }

 private:
  FiberContext context_;
};

// The stacks of up to `count` fibers of `bytes` each (reserved, committed as
// touched), with an inaccessible guard page below each so that an overflow
// faults instead of corrupting the neighbour.
class FiberStacks {
 public:
  FiberStacks(size_t count, size_t bytes);
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;

  size_t count() const { return count_; }
  char* Top(size_t i) const;  // the (aligned) top of stack i

 private:
  size_t count_ = 0, stride_ = 0;
  char* memory_ = nullptr;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_FIBER_H_
