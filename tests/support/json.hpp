#pragma once
// A small JSON reader for the conformance vectors (objects, arrays, numbers, strings, null).

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace lynx_test {

struct json {
  enum kind_t { null, number, string, array, object, boolean } kind = null;
  double num = 0;
  std::string str;
  std::vector<json> items;
  std::map<std::string, json> fields;

  const json& operator[](const std::string& key) const {
    auto it = fields.find(key);
    if (it == fields.end()) throw std::runtime_error("missing key " + key);
    return it->second;
  }
  bool has(const std::string& key) const { return fields.count(key) > 0; }

  static json parse(const std::string& text) {
    std::size_t i = 0;
    json v = value(text, i);
    return v;
  }

 private:
  static void skip(const std::string& s, std::size_t& i) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  static std::string string_at(const std::string& s, std::size_t& i) {
    std::string out;
    for (++i; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] == '\\') ++i;
      out += s[i];
    }
    ++i;
    return out;
  }
  static json value(const std::string& s, std::size_t& i) {
    skip(s, i);
    json v;
    if (s[i] == '{') {
      v.kind = object;
      ++i;
      for (skip(s, i); s[i] != '}'; skip(s, i)) {
        std::string key = string_at(s, i);
        skip(s, i);
        ++i;  // ':'
        v.fields[key] = value(s, i);
        skip(s, i);
        if (s[i] == ',') ++i;
      }
      ++i;
    } else if (s[i] == '[') {
      v.kind = array;
      ++i;
      for (skip(s, i); s[i] != ']'; skip(s, i)) {
        v.items.push_back(value(s, i));
        skip(s, i);
        if (s[i] == ',') ++i;
      }
      ++i;
    } else if (s[i] == '"') {
      v.kind = string;
      v.str = string_at(s, i);
    } else if (s.compare(i, 4, "null") == 0) {
      i += 4;
    } else if (s.compare(i, 4, "true") == 0 || s.compare(i, 5, "false") == 0) {
      v.kind = boolean;
      v.num = s[i] == 't';
      i += s[i] == 't' ? 4 : 5;
    } else {
      v.kind = number;
      char* end = nullptr;
      v.num = std::strtod(s.c_str() + i, &end);
      if (end == s.c_str() + i) throw std::runtime_error("bad json at " + std::to_string(i));
      i = static_cast<std::size_t>(end - s.c_str());
    }
    return v;
  }
};

}  // namespace lynx_test
