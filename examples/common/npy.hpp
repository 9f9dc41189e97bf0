#pragma once
// Minimal .npy reading and writing (little-endian, C order) for float32/int32 arrays.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace npy {

struct array {
  std::string descr;                // "<f4" or "<i4"
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
  std::int64_t size() const {
    std::int64_t s = 1;
    for (auto d : shape) s *= d;
    return s;
  }
  template <class T>
  std::vector<T> as() const {
    if (bytes.size() != static_cast<std::size_t>(size()) * sizeof(T))
      throw std::runtime_error("npy: element size does not match " + descr);
    std::vector<T> v(size());
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
};

inline array load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  char magic[8];
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw std::runtime_error(path + ": not a .npy file");
  std::uint32_t header_len = 0;
  if (magic[6] == 1) {
    std::uint16_t h;
    in.read(reinterpret_cast<char*>(&h), 2);
    header_len = h;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  array a;
  const auto field = [&](const std::string& key) {
    const auto at = header.find("'" + key + "'");
    if (at == std::string::npos) throw std::runtime_error(path + ": header lacks " + key);
    return header.substr(header.find(':', at) + 1);
  };
  const std::string d = field("descr");
  a.descr = d.substr(d.find('\'') + 1, 3);
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw std::runtime_error(path + ": Fortran order is not supported");
  std::string shape = field("shape");
  shape = shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  std::stringstream ss(shape);
  for (std::string tok; std::getline(ss, tok, ',');)
    if (tok.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoll(tok));
  if (a.descr != "<f4" && a.descr != "<i4") throw std::runtime_error(path + ": unsupported dtype " + a.descr);
  a.bytes.resize(static_cast<std::size_t>(a.size()) * 4);
  in.read(a.bytes.data(), static_cast<std::streamsize>(a.bytes.size()));
  if (!in) throw std::runtime_error(path + ": truncated");
  return a;
}

template <class T>
void save(const std::string& path, const std::vector<T>& data, const std::vector<std::int64_t>& shape) {
  static_assert(sizeof(T) == 4, "float32 or int32 only");
  const char* descr = std::is_floating_point_v<T> ? "<f4" : "<i4";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) header += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  header += "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * 4));
}

}  // namespace npy
