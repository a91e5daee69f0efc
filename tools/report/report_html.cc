#include "tools/report/report_html.h"

#include <string_view>

#include "compiler/support/file.h"
#include "report_assets.h"

namespace gptc::tools::report {

namespace {

std::string EscapeHtml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The data as a script element's text: '<' only occurs inside JSON strings,
// where "\u003c" means the same and no "</script>" or "<!--" can end the
// element early. Bytes that are not UTF-8 become U+FFFD.
std::string ScriptJson(const nlohmann::json& data) {
  const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

// Runs before the page's script: an error anywhere (also one the script
// rethrows from a view that failed) is kept on the root element, where a
// test or a reader finds it.
constexpr std::string_view kErrorHook =
    "window.addEventListener('error',function(e){var d=document.documentElement;"
    "var m=e.message||String(e.error);d.dataset.jsErrors=d.dataset.jsErrors?"
    "d.dataset.jsErrors+' | '+m:m;});";

}  // namespace

std::string RenderReportHtml(const nlohmann::json& data) {
  std::string html = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>";
  html += EscapeHtml(data.value("title", "gptc report"));
  html += "</title>\n<script>";
  html += kErrorHook;
  html += "</script>\n<style>\n";
  html += kReportCss;
  html += "</style></head>\n<body><div id=\"app\"></div>\n";
  html += "<script id=\"gptc-data\" type=\"application/json\">";
  html += ScriptJson(data);
  html += "</script>\n<script>\n";
  html += kReportJs;
  html += "</script></body></html>\n";
  return html;
}

Status WriteReport(const std::string& path, const ReportInput& input) {
  ASSIGN_OR_RETURN(nlohmann::json data, ReportData(input));
  return WriteFileAtomically(path, RenderReportHtml(data));
}

}  // namespace gptc::tools::report
