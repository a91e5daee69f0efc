#include "runtime/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if !defined(__x86_64__)
#error "the emulated device's fibers are written for x86-64"
#endif

extern "C" {
void gptc_emu_switch_fiber(gptc::rt::emu::FiberContext* from, gptc::rt::emu::FiberContext* to);
void gptc_emu_fiber_trampoline();
}

// The System V x86-64 callee-saved state: rbx, rbp, r12-r15 and the stack
// pointer, plus the control words of SSE (MXCSR) and x87, which a callee
// must preserve too. Everything is pushed on the running stack; the context
// keeps only the stack pointer.
asm(R"(
  .text
  .globl gptc_emu_switch_fiber
  .hidden gptc_emu_switch_fiber
  .type gptc_emu_switch_fiber, @function
gptc_emu_switch_fiber:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq (%rsi), %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gptc_emu_switch_fiber, .-gptc_emu_switch_fiber

  .globl gptc_emu_fiber_trampoline
  .hidden gptc_emu_fiber_trampoline
  .type gptc_emu_fiber_trampoline, @function
gptc_emu_fiber_trampoline:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size gptc_emu_fiber_trampoline, .-gptc_emu_fiber_trampoline
)");

namespace gptc::rt::emu {

void SwitchFiber(FiberContext* from, FiberContext* to) { gptc_emu_switch_fiber(from, to); }

void Fiber::Start(char* stack_top, Body body, void* arg) {
  // The frame gptc_emu_switch_fiber pops, top down: the return address (the
  // trampoline, which calls body(arg) from r12/r13 with the stack 16-byte
  // aligned), rbp, rbx, r12, r13, r14, r15, then MXCSR and the x87 word.
  auto* slot = reinterpret_cast<uint64_t*>(stack_top);
  slot[-1] = reinterpret_cast<uint64_t>(&gptc_emu_fiber_trampoline);
  slot[-2] = 0;                                 // rbp
  slot[-3] = 0;                                 // rbx
  slot[-4] = reinterpret_cast<uint64_t>(body);  // r12
  slot[-5] = reinterpret_cast<uint64_t>(arg);   // r13
  slot[-6] = 0;                                 // r14
  slot[-7] = 0;                                 // r15
  slot[-8] = uint64_t{0x037f} << 32 | 0x1f80;   // x87 control word, MXCSR: the defaults
  context_.sp = &slot[-8];
}

FiberStacks::FiberStacks(size_t count, size_t bytes) : count_(count) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  stride_ = bytes + page;  // a guard page below every stack
  void* m = mmap(nullptr, stride_ * count, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "emulated device: cannot reserve %zu fiber stacks of %zu bytes\n", count,
                 bytes);
    std::abort();
  }
  memory_ = static_cast<char*>(m);
  for (size_t i = 0; i < count; ++i) mprotect(memory_ + i * stride_, page, PROT_NONE);
}

FiberStacks::~FiberStacks() {
  if (memory_ != nullptr) munmap(memory_, stride_ * count_);
}

char* FiberStacks::Top(size_t i) const { return memory_ + (i + 1) * stride_; }

}  // namespace gptc::rt::emu
