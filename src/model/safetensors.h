// safetensors reader (memory-mapped, single file or sharded) and writer.
// Format: 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {str: str}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...}
// then the data section; offsets are relative to the start of the data section.
// Opening reads headers only (cost independent of tensor data size); data is reached through the map.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/dtype.h"

namespace degen {

// One tensor of a checkpoint: a view into a memory-mapped file.
struct TensorView;
// Asks a background thread to read a tensor's pages from storage into the page cache (MADV_WILLNEED
// on its mapping) and returns at once: its next reader finds them there instead of faulting them in
// 128 KiB at a time, and the reads overlap the arithmetic, so a checkpoint larger than RAM streams
// at the storage's rate. A hint (not given for a tensor under 1 MiB, dropped when 32 are
// waiting); no effect on any value.
void read_ahead(const TensorView& t);

struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;   // row-major, outermost first
  const uint8_t* data = nullptr;  // points into the mapping; valid while its file is open
  size_t nbytes = 0;
  size_t offset = 0;            // begin offset within the data section
  std::string file;             // file name (not path) it lives in, for messages
  int64_t numel() const;
  float at(size_t i) const { return load_as_f32(data, dtype, i); }  // element i as fp32
};

// "[2, 3, 4]"
std::string shape_str(const std::vector<int64_t>& shape);

// One open .safetensors file. Every structural check is done at open():
// header length past end of file, header not JSON, unknown dtype, offsets outside the data section,
// overlapping tensors, gaps or trailing bytes in the data section (tensors must cover it exactly, from
// offset 0 to the end of the file), byte size not matching dtype x shape, duplicate names, truncated file.
// Each failure throws InputError naming the file and (where there is one) the tensor.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in data-offset order
  const TensorView* find(const std::string& name) const;              // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& header_json() const { return header_; }           // raw header text

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::string header_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint folder: model.safetensors.index.json (weight_map -> shard files)
// when present, else model.safetensors, else the single *.safetensors file in the folder.
// Errors: index naming a missing shard, a tensor listed in the index but absent from its shard,
// the same tensor name in two shards, no safetensors file at all.
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir);
  const std::filesystem::path& dir() const { return dir_; }
  const TensorView* find(const std::string& name) const;  // nullptr when absent
  const TensorView& get(const std::string& name) const;   // throws InputError when absent
  std::vector<const TensorView*> tensors() const;         // sorted by name
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  size_t total_bytes() const;                             // sum of tensor byte sizes

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

// A folder with weights (model.safetensors, an index, or any *.safetensors), as opposed to a
// config-only folder (synth of a real-size preset without --weights).
bool has_weight_files(const std::filesystem::path& dir);

// Builds a .safetensors file in memory and writes it atomically (temp file + fsync + rename).
// Tensors are laid out contiguously in insertion order (no gaps: the reference reader rejects them);
// the header is padded with spaces so that the data section starts at a multiple of 8, as the
// reference implementation does. add() throws std::invalid_argument on a duplicate name or a
// byte count that does not match dtype x shape.
class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value);
  // Copies nbytes from data; nbytes must equal numel(shape) * dtype_size(dtype).
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
           const void* data, size_t nbytes);
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v);
  size_t size() const { return entries_.size(); }
  void write(const std::filesystem::path& path) const;

 private:
  struct Entry { std::string name; DType dtype; std::vector<int64_t> shape; std::vector<uint8_t> bytes; };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A file larger than memory: the header from the declarations, then each tensor's bytes asked of
// `fill` chunk by chunk (tensor index, byte offset in the tensor, buffer, bytes; chunks are multiples
// of 8 bytes except a tensor's last), written atomically like SafetensorsWriter::write (the same
// bytes for the same content). nbytes of each declaration is computed here from dtype and shape.
struct TensorDecl {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
};
using TensorFill = std::function<void(size_t tensor, uint64_t offset, uint8_t* buf, size_t n)>;
void write_safetensors_streamed(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata,
                                std::vector<TensorDecl> tensors, const TensorFill& fill, size_t chunk_bytes = 64u << 20);

}  // namespace degen
