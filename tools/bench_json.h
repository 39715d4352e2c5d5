// A tiny JSON writer for mlakit-bench results (no dependencies). Non-finite numbers become null.
#pragma once

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace mlakit_bench {

inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += c;
        }
    }
  }
  return o + "\"";
}

inline std::string json_num(double x) {
  if (!std::isfinite(x)) return "null";
  std::ostringstream s;
  s.precision(10);
  s << x;
  return s.str();
}

// Builds one JSON object; values are pre-rendered JSON text.
class JsonObject {
 public:
  JsonObject& raw(const std::string& key, const std::string& json) {
    items_.push_back(json_str(key) + ": " + json);
    return *this;
  }
  JsonObject& str(const std::string& key, const std::string& v) { return raw(key, json_str(v)); }
  JsonObject& num(const std::string& key, double v) { return raw(key, json_num(v)); }
  JsonObject& boolean(const std::string& key, bool v) { return raw(key, v ? "true" : "false"); }
  template <class T>
  JsonObject& array(const std::string& key, const std::vector<T>& v) {
    std::string a = "[";
    for (size_t i = 0; i < v.size(); ++i) a += (i ? ", " : "") + json_num(static_cast<double>(v[i]));
    return raw(key, a + "]");
  }
  std::string dump(int indent = 0) const {
    const std::string pad(static_cast<size_t>(indent) + 2, ' ');
    std::string o = "{\n";
    for (size_t i = 0; i < items_.size(); ++i)
      o += pad + items_[i] + (i + 1 < items_.size() ? ",\n" : "\n");
    return o + std::string(static_cast<size_t>(indent), ' ') + "}";
  }

 private:
  std::vector<std::string> items_;
};

inline std::string json_list(const std::vector<std::string>& rendered, int indent = 0) {
  if (rendered.empty()) return "[]";
  const std::string pad(static_cast<size_t>(indent) + 2, ' ');
  std::string o = "[\n";
  for (size_t i = 0; i < rendered.size(); ++i)
    o += pad + rendered[i] + (i + 1 < rendered.size() ? ",\n" : "\n");
  return o + std::string(static_cast<size_t>(indent), ' ') + "]";
}

}  // namespace mlakit_bench
