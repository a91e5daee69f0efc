// The HTML report page: one self-contained file (its data, script and style
// inline; no network, no file beside it) that opens from disk in a browser.
// `gptc report` writes it for an artifact, a profile and run logs;
// `gptrun --report` at the end of a run and at each checkpoint.
#ifndef GPTC_TOOLS_REPORT_REPORT_HTML_H_
#define GPTC_TOOLS_REPORT_REPORT_HTML_H_

#include <nlohmann/json.hpp>
#include <string>

#include "compiler/support/status.h"
#include "tools/report/report_data.h"

namespace gptc::tools::report {

// The page of `data` (ReportData's object).
std::string RenderReportHtml(const nlohmann::json& data);

// ReportData, rendered and written to `path` whole or not at all.
Status WriteReport(const std::string& path, const ReportInput& input);

}  // namespace gptc::tools::report

#endif  // GPTC_TOOLS_REPORT_REPORT_HTML_H_
