// `dsworker --report` (and the runtime half of `dsrun report`), like DeepSpeed's ds_report: what this
// build contains and what this machine offers it — versions, build options, the CPU's vector and
// matrix extensions, OpenBLAS's kernel, the Gloo transport, a CUDA driver and NCCL if installed
// (looked up with dlopen: this build has no CUDA backend yet), and the model plugins it can find.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// Sections of name → value pairs, in print order; never throws for a missing component (it is
// reported as such).
nlohmann::ordered_json system_report();

// The report as aligned text: "section" headers, then "  name ...... value" lines.
std::string format_report(const nlohmann::ordered_json& report);

}  // namespace ds
