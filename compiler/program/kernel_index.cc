#include "compiler/program/kernel_index.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "compiler/program/json_field.h"

namespace gptc::program {

using nlohmann::json;

json ToJson(const KernelRecord& k) {
  json j{
      {"entry", k.entry}, {"name", k.name}, {"ptx_offset", k.ptx_offset}, {"ptx_size", k.ptx_size}};
  if (k.cubin) {
    j["cubin_offset"] = k.cubin->first;
    j["cubin_size"] = k.cubin->second;
    j["registers"] = k.registers;
    j["spill_bytes"] = k.spill_bytes;
  }
  return j;
}

StatusOr<KernelRecord> KernelRecordFromJson(const json& j, std::string_view where) {
  KernelRecord k;
  ASSIGN_OR_RETURN(k.entry, JsonField<std::string>(j, "entry", where));
  ASSIGN_OR_RETURN(k.name, JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(k.ptx_offset, JsonField<int64_t>(j, "ptx_offset", where));
  ASSIGN_OR_RETURN(k.ptx_size, JsonField<int64_t>(j, "ptx_size", where));
  if (j.contains("cubin_offset")) {
    ASSIGN_OR_RETURN(int64_t offset, JsonField<int64_t>(j, "cubin_offset", where));
    ASSIGN_OR_RETURN(int64_t size, JsonField<int64_t>(j, "cubin_size", where));
    k.cubin = std::pair{offset, size};
  }
  ASSIGN_OR_RETURN(k.registers, JsonFieldOr<int64_t>(j, "registers", where, 0));
  ASSIGN_OR_RETURN(k.spill_bytes, JsonFieldOr<int64_t>(j, "spill_bytes", where, 0));
  return k;
}

json ToJson(const HostKernelRecord& k) {
  return json{{"entry", k.entry},
              {"name", k.name},
              {"symbol", k.symbol},
              {"params", k.params},
              {"uses_sync", k.uses_sync},
              {"host_shared_bytes", k.host_shared_bytes},
              {"static_smem", k.static_smem},
              {"registers", k.registers},
              {"barriers", k.barriers},
              {"shuffles", k.shuffles},
              {"mmas", k.mmas},
              {"ldmatrices", k.ldmatrices},
              {"atomics", k.atomics},
              {"accesses", k.accesses},
              {"wgmmas", k.wgmmas}};
}

StatusOr<HostKernelRecord> HostKernelRecordFromJson(const json& j, std::string_view where) {
  HostKernelRecord k;
  ASSIGN_OR_RETURN(k.entry, JsonField<std::string>(j, "entry", where));
  ASSIGN_OR_RETURN(k.name, JsonField<std::string>(j, "name", where));
  ASSIGN_OR_RETURN(k.symbol, JsonField<std::string>(j, "symbol", where));
  ASSIGN_OR_RETURN(k.params, JsonField<int64_t>(j, "params", where));
  ASSIGN_OR_RETURN(k.uses_sync, JsonField<bool>(j, "uses_sync", where));
  for (auto [field, value] :
       {std::pair{"host_shared_bytes", &k.host_shared_bytes},
        std::pair{"static_smem", &k.static_smem}, std::pair{"registers", &k.registers},
        std::pair{"barriers", &k.barriers}, std::pair{"shuffles", &k.shuffles},
        std::pair{"mmas", &k.mmas}, std::pair{"ldmatrices", &k.ldmatrices},
        std::pair{"atomics", &k.atomics}, std::pair{"accesses", &k.accesses}}) {
    ASSIGN_OR_RETURN(*value, JsonField<int64_t>(j, field, where));
  }
  // Optional: an older library must reach the kernel ABI check, which names it.
  ASSIGN_OR_RETURN(k.wgmmas, JsonFieldOr<int64_t>(j, "wgmmas", where, 0));
  return k;
}

}  // namespace gptc::program
