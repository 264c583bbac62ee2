// JUnit XML, the form CI systems (Jenkins, GitLab, GitHub test reporters, Buildkite) show natively:
//   <testsuites name tests failures errors skipped time>
//     <testsuite name tests failures errors skipped time>     one per compared run, per sweep cell,
//                                                             per bisect
//       <testcase classname name time>                        one per (cell, case)
//         <failure type message>details</failure>             bad (message: the verdict line)
//         <error type message>details</error>                 the cell crashed (sweep --isolate)
//         <skipped message/>                                  untestable
//         <system-out>warnings</system-out>                   model-intrinsic degeneration, notes
// Classnames: degenbisect.compare.<suite>, degenbisect.sweep.<sweep name>, degenbisect.bisect; the
// testcase name is the case id (with " [<cell>]" for sweeps). Times are seconds; a sweep cell's
// time is shared equally by its cases (the cell result holds no per-case time). Model-intrinsic
// degeneration passes with a system-out note (metrics.md §6), unless the compare result's exit code
// says it failed (--fail-on-model-degeneration).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace degen::report {

// The JUnit document of a report document (json.h).
std::string render_junit(const nlohmann::json& doc);

// The JUnit document of one compare result (CompareResult::to_json(), or the untestable form that
// `compare --json` writes), for `compare --junit`.
std::string junit_for_compare(const nlohmann::json& compare_result);

// The JUnit document of a compare run that could not be tested at all: one skipped testcase per case.
std::string junit_untestable_compare(const std::string& suite, const std::vector<std::string>& case_ids, const std::string& reason);

}  // namespace degen::report
