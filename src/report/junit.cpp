// JUnit writer (see junit.h): suites and cases collected first, then written with every name,
// message and body escaped (xml_attr / xml_escape), so text from a broken model never breaks the XML.
#include "report/junit.h"

#include <cstdio>
#include <set>

#include "report/common.h"
#include "report/escape.h"
#include "report/json.h"
#include "util/error.h"

namespace degen::report {

using nlohmann::json;

namespace {

struct Case {
  std::string classname, name;
  double seconds = 0;
  std::string outcome;  // "", "failure", "error", "skipped"
  std::string type, message, body, out;
};

struct Suite {
  std::string name;
  double seconds = 0;
  std::vector<Case> cases;
};

std::string s(const json& v) { return v.is_string() ? v.get<std::string>() : v.is_null() ? "" : v.dump(); }

std::string secs(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v >= 0 && v < 1e12 ? v : 0.0);
  return b;
}

std::string join_lines(const json& reasons) {
  std::string o;
  for (const json& r : reasons) o += s(r) + "\n";
  return o;
}

std::string verdict_line(const std::string& verdict, const json& reasons) {
  return reasons.empty() ? verdict : verdict + ": " + s(reasons[0]);
}

Suite compare_suite(const json& c) {
  Suite st;
  st.name = cat("degenbisect compare ", s(c["suite"]), " [", s(c["config"]), "]");
  st.seconds = as_num(c["seconds"]).value_or(0);
  const std::string classname = "degenbisect.compare." + s(c["suite"]);
  // Model-intrinsic degeneration fails only under --fail-on-model-degeneration (json.cpp).
  const bool fail_intrinsic = c["fail_on_model_degeneration"].get<bool>();
  if (c["verdict"] == "untestable" && c["cases"].empty()) {
    st.cases.push_back({classname, "(all cases)", 0, "skipped", "untestable", s(c["reason"]), "", ""});
    return st;
  }
  for (const json& k : c["cases"]) {
    Case t{classname, s(k["id"]), as_num(k["seconds"]).value_or(0), "", "", "", "", ""};
    const std::string v = s(k["verdict"]);
    if (v == "bad" || (v == "model-intrinsic" && fail_intrinsic)) {
      t.outcome = "failure";
      t.type = v;
      t.message = verdict_line(v, k["reasons"]);
      t.body = join_lines(k["reasons"]);
    } else if (v == "untestable") {
      t.outcome = "skipped";
      t.message = verdict_line(v, k["reasons"]);
    } else {
      t.out = join_lines(k["reasons"]);
    }
    st.cases.push_back(std::move(t));
  }
  return st;
}

std::vector<Suite> sweep_suites(const json& sw) {
  std::vector<Suite> out;
  const std::string classname = "degenbisect.sweep." + s(sw["name"]);
  std::vector<std::string> all_ids;  // for cells without per-case results (untestable, crashed)
  std::set<std::string> seen;
  for (const json& r : sw["rows"])
    for (const json& k : r["cases"])
      if (seen.insert(s(k["id"])).second) all_ids.push_back(s(k["id"]));
  for (const json& r : sw["rows"]) {
    Suite st;
    const std::string cell = s(r["cell"]);
    st.name = cat("sweep ", s(sw["name"]), ": ", cell);
    st.seconds = as_num(r["seconds"]).value_or(0);
    const std::string v = s(r["verdict"]);
    const json& cases = r["cases"];
    if (cases.empty()) {
      std::vector<std::string> ids = all_ids.empty() ? std::vector<std::string>{"(all cases)"} : all_ids;
      for (const std::string& id : ids) {
        Case t{classname, cat(id, " [", cell, "]"), st.seconds / static_cast<double>(ids.size()), "", "", "", "", ""};
        const std::string line = s(r["reason"]).empty() ? v : v + ": " + s(r["reason"]);
        if (v == "untestable") {
          t.outcome = "skipped";
          t.message = line;
        } else if (v == "error") {
          t.outcome = "error";
          t.type = "error";
          t.message = line;
          t.body = s(r["reason"]);
        } else if (v == "bad") {
          t.outcome = "failure";
          t.type = "bad";
          t.message = line;
          t.body = s(r["reason"]);
        }
        st.cases.push_back(std::move(t));
      }
    } else {
      for (const json& k : cases) {
        Case t{classname, cat(s(k["id"]), " [", cell, "]"), st.seconds / static_cast<double>(cases.size()), "", "", "", "", ""};
        const std::string kv = s(k["verdict"]);
        if (kv == "bad") {
          t.outcome = "failure";
          t.type = "bad";
          t.message = verdict_line(kv, k["reasons"]);
          t.body = join_lines(k["reasons"]);
        } else if (kv == "untestable") {
          t.outcome = "skipped";
          t.message = verdict_line(kv, k["reasons"]);
        } else {
          t.out = join_lines(k["reasons"]);
        }
        st.cases.push_back(std::move(t));
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

Suite bisect_suite(const json& b) {
  Suite st;
  st.name = cat("degenbisect bisect [", s(b["bad"]), "]");
  Case t{"degenbisect.bisect", cat("bisect ", s(b["bad"])), 0, "", "", "", "", ""};
  const std::string v = s(b["verdict"]);
  const std::string para = s(b["paragraph"]);
  if (v == "bad") {
    t.outcome = "failure";
    t.type = s(b["status"]);
    t.message = utf8_truncate(para, 500);
    t.body = para;
  } else if (v == "untestable") {
    t.outcome = "skipped";
    t.message = utf8_truncate(para, 500);
  } else {
    t.out = para;
  }
  st.cases.push_back(std::move(t));
  return st;
}

std::string write_xml(const std::string& name, const std::vector<Suite>& suites) {
  size_t tests = 0, failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  std::string body;
  for (const Suite& st : suites) {
    size_t f = 0, e = 0, sk = 0;
    std::string cases;
    for (const Case& c : st.cases) {
      f += c.outcome == "failure";
      e += c.outcome == "error";
      sk += c.outcome == "skipped";
      cases += "    <testcase classname=\"" + xml_attr(c.classname) + "\" name=\"" + xml_attr(c.name) + "\" time=\"" + secs(c.seconds) + "\"";
      if (c.outcome.empty() && c.out.empty()) {
        cases += "/>\n";
        continue;
      }
      cases += ">\n";
      if (c.outcome == "failure" || c.outcome == "error")
        cases += "      <" + c.outcome + " type=\"" + xml_attr(c.type) + "\" message=\"" + xml_attr(c.message) + "\">" + xml_escape(c.body) +
                 "</" + c.outcome + ">\n";
      else if (c.outcome == "skipped")
        cases += "      <skipped message=\"" + xml_attr(c.message) + "\"/>\n";
      if (!c.out.empty()) cases += "      <system-out>" + xml_escape(c.out) + "</system-out>\n";
      cases += "    </testcase>\n";
    }
    body += "  <testsuite name=\"" + xml_attr(st.name) + "\" tests=\"" + std::to_string(st.cases.size()) + "\" failures=\"" +
            std::to_string(f) + "\" errors=\"" + std::to_string(e) + "\" skipped=\"" + std::to_string(sk) + "\" time=\"" + secs(st.seconds) +
            "\">\n" + cases + "  </testsuite>\n";
    tests += st.cases.size();
    failures += f;
    errors += e;
    skipped += sk;
    seconds += st.seconds;
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"" + xml_attr(name) + "\" tests=\"" + std::to_string(tests) +
         "\" failures=\"" + std::to_string(failures) + "\" errors=\"" + std::to_string(errors) + "\" skipped=\"" + std::to_string(skipped) +
         "\" time=\"" + secs(seconds) + "\">\n" + body + "</testsuites>\n";
}

}  // namespace

std::string render_junit(const json& doc) {
  std::vector<Suite> suites;
  for (const json& c : doc["compares"]) suites.push_back(compare_suite(c));
  for (const json& sw : doc["sweeps"])
    for (Suite& st : sweep_suites(sw)) suites.push_back(std::move(st));
  for (const json& b : doc["bisects"]) suites.push_back(bisect_suite(b));
  return write_xml("degenbisect report", suites);
}

std::string junit_for_compare(const json& compare_result) {
  ReportInputs in;
  in.compares.push_back({"", compare_result});
  ReportOptions opt;
  opt.model_dir = std::filesystem::path();  // no tokenizer: JUnit shows no text
  const json doc = build_report(in, opt);
  const Suite st = compare_suite(doc["compares"][0]);
  return write_xml(st.name, {st});
}

std::string junit_untestable_compare(const std::string& suite, const std::vector<std::string>& case_ids, const std::string& reason) {
  Suite st;
  st.name = cat("degenbisect compare ", suite);
  for (const std::string& id : case_ids) st.cases.push_back({"degenbisect.compare." + suite, id, 0, "skipped", "", reason, "", ""});
  return write_xml(st.name, {st});
}

}  // namespace degen::report
