// Shared by the codegen tests: parse IR text, compile every kernel and check
// the invariants every kernel must meet (PTX entry and launch bounds, sm_90
// limits, ptxas assembly without spills when ptxas is installed), name a
// plan's instructions.
#ifndef GPTC_TESTS_COMPILER_CODEGEN_CODEGEN_TEST_UTIL_H_
#define GPTC_TESTS_COMPILER_CODEGEN_CODEGEN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/ir/parser.h"

namespace gptc::codegen {

inline std::unique_ptr<ir::Module> Parse(std::string_view text) {
  auto module = ir::ParseAndVerifyModule(text);
  EXPECT_TRUE(module.ok()) << module.status().message();
  return module.ok() ? std::move(module).value() : nullptr;
}

inline bool HavePtxas() { return FindPtxas().has_value(); }

// Compiles every fusion and checks the common kernel invariants.
inline CompiledKernels CompileAll(const ir::Module& module, const CodegenOptions& options = {}) {
  auto kernels = CompileFusions(module, options);
  EXPECT_TRUE(kernels.ok()) << kernels.status().message();
  if (!kernels.ok()) return {};
  for (const CompiledKernel& k : kernels->kernels) {
    if (k.code_of >= 0) {  // Note [kernel deduplication]
      EXPECT_LT(k.code_of, static_cast<int64_t>(kernels->kernels.size()));
      if (k.code_of >= static_cast<int64_t>(kernels->kernels.size())) continue;
      const CompiledKernel& code = kernels->kernels[k.code_of];
      EXPECT_EQ(code.code_of, -1);
      EXPECT_EQ(k.spec.name, code.spec.name);
      EXPECT_TRUE(k.ptx.empty());
      continue;
    }
    if (const char* dir = std::getenv("GPTC_CODEGEN_DUMP_DIR")) {  // for reading the PTX
      std::ofstream(std::string(dir) + "/" + k.spec.name + "." + options.target + ".ptx") << k.ptx;
    }
    EXPECT_NE(k.ptx.find(".entry " + k.spec.name), std::string::npos) << k.ptx;
    EXPECT_NE(k.ptx.find(".target " + options.target), std::string::npos) << k.ptx;
    EXPECT_NE(k.ptx.find(".maxntid " + std::to_string(k.spec.block.x) + ", 1, 1"),
              std::string::npos)
        << k.ptx;
    EXPECT_LE(k.spec.block.product(), kMaxThreadsPerBlock);
    EXPECT_GE(k.spec.grid.product(), 1);
    EXPECT_LE(k.spec.static_shared_bytes, kMaxSharedBytesPerBlock);
    if (HavePtxas()) {
      EXPECT_TRUE(k.ptxas.has_value());
      if (!k.ptxas) continue;
      EXPECT_GT(k.ptxas->registers, 0);
      EXPECT_LE(k.ptxas->registers, kMaxRegistersPerThread);
      EXPECT_EQ(k.ptxas->shared_bytes, k.spec.static_shared_bytes);
      EXPECT_EQ(k.ptxas->spill_stores, 0);
      EXPECT_FALSE(k.ptxas->cubin.empty());
      std::printf("kernel %s: grid %ld block %ld, %ld registers, %ld bytes smem\n",
                  k.spec.name.c_str(), static_cast<long>(k.spec.grid.x),
                  static_cast<long>(k.spec.block.x), static_cast<long>(k.ptxas->registers),
                  static_cast<long>(k.ptxas->shared_bytes));
    }
  }
  return std::move(kernels).value();
}

// The names of `insts`, for comparing a plan's lists with expectations.
inline std::vector<std::string> Names(const std::vector<const ir::Instruction*>& insts) {
  std::vector<std::string> names;
  for (const ir::Instruction* inst : insts) names.push_back(inst->name());
  return names;
}

}  // namespace gptc::codegen

#endif  // GPTC_TESTS_COMPILER_CODEGEN_CODEGEN_TEST_UTIL_H_
