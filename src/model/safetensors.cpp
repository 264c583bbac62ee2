// safetensors reader (mmap, header-only parse, every structural check at open) and atomic writer.
// See safetensors.h for the format. Every number read from a file is untrusted: sizes and offsets
// are checked with overflow-safe arithmetic before any pointer is formed.
#include "model/safetensors.h"
#include "util/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <deque>
#include <condition_variable>
#include <mutex>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_input.h"
#include "util/output_file.h"

namespace degen {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// note: the reference implementation (huggingface/safetensors) refuses headers over 100 MB;
// a length above this is a corrupt or hostile file, not a real checkpoint.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const char* kSupportedDTypes = "F32, F64, BF16, F16, F8_E4M3, I32, I64, U8";

std::string errno_str(int e) { return std::strerror(e); }


// "a number", "an array", ... for messages about wrong JSON types.
std::string json_kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a non-integer number";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "?";
}

// A JSON value as a non-negative integer; false when it is anything else.
bool json_u64(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) { *out = j.get<uint64_t>(); return true; }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

std::string compact(const json& j) { return json_excerpt(j, 60); }

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the header text, recording the first duplicate key of any object (nlohmann keeps the
// last duplicate silently). Throws InputError when the text is not JSON or has a duplicate.
json parse_header(const std::string& text, const std::string& file) {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each enclosing object
  std::string top_key;                               // current top-level key (tensor name)
  std::string duplicate;                             // first duplicate found, as a message
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (depth == 1) top_key = k;
        if (!open_objects.empty() && !open_objects.back().insert(k).second && duplicate.empty()) {
          if (depth == 1)
            duplicate = k == "__metadata__" ? std::string("duplicate '__metadata__' entry")
                                            : cat("duplicate tensor name '", k, "'");
          else
            duplicate = cat("entry '", top_key, "': duplicate key '", k, "'");
        }
        break;
      }
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = parse_json(text, file, /*allow_exceptions=*/true, cb);
  } catch (const json::exception& e) {
    input_error(file, ": header is not JSON (", text.size(), " bytes after the 8-byte length): ",
                e.what());
  }
  if (!duplicate.empty()) input_error(file, ": header has a ", duplicate, " (a name must appear once)");
  return j;
}

// Element count of a shape, or false on overflow.
bool checked_numel(const std::vector<int64_t>& shape, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Parses one tensor entry of the header into `t` (dtype, shape) and its [begin, end) offsets.
void parse_entry(const std::string& file, const std::string& name, const json& e, TensorView* t,
                 uint64_t* begin, uint64_t* end) {
  auto where = [&]() { return cat(file, ": tensor '", name, "': "); };
  if (!e.is_object())
    input_error(where(), "expected an object {\"dtype\", \"shape\", \"data_offsets\"}, found ",
                json_kind(e), " ", compact(e));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) input_error(where(), "missing '", key, "' (found ", compact(e), ")");
  for (const auto& [k, v] : e.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      input_error(where(), "unexpected key '", k, "' (expected only dtype, shape, data_offsets)");

  const json& dt = e["dtype"];
  if (!dt.is_string()) input_error(where(), "'dtype' must be a string, found ", json_kind(dt), " ", compact(dt));
  const std::string& dts = dt.get_ref<const std::string&>();
  if (!dtype_from_name(dts, &t->dtype))
    input_error(where(), "unsupported dtype '", dts, "' (supported: ", kSupportedDTypes, ")");

  const json& sh = e["shape"];
  if (!sh.is_array()) input_error(where(), "'shape' must be an array of integers, found ", json_kind(sh), " ", compact(sh));
  t->shape.clear();
  for (size_t i = 0; i < sh.size(); ++i) {
    uint64_t d = 0;
    if (!json_u64(sh[i], &d) || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      input_error(where(), "shape ", compact(sh), ": dimension ", i, " must be a non-negative integer, found ",
                  sh[i].is_number_integer() ? "negative" : json_kind(sh[i]), " ", compact(sh[i]));
    t->shape.push_back(static_cast<int64_t>(d));
  }

  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    input_error(where(), "'data_offsets' must be an array [begin, end] of two integers, found ",
                json_kind(off), " ", compact(off));
  if (!json_u64(off[0], begin) || !json_u64(off[1], end))
    input_error(where(), "data_offsets ", compact(off), " must be two non-negative integers");
  if (*begin > *end)
    input_error(where(), "data_offsets [", *begin, ", ", *end, "]: begin is after end");

  uint64_t numel = 0, want = 0;
  if (!checked_numel(t->shape, &numel) || __builtin_mul_overflow(numel, dtype_size(t->dtype), &want))
    input_error(where(), "shape ", shape_str(t->shape), " of ", dts, " overflows 64-bit byte size");
  if (*end - *begin != want)
    input_error(where(), "data_offsets [", *begin, ", ", *end, "] give ", *end - *begin, " bytes, expected ",
                want, " (", dts, " x ", shape_str(t->shape), ")");
}

// The 8-byte length and the JSON header of a file holding `tensors` contiguously in order.
std::string safetensors_prefix(const std::map<std::string, std::string>& metadata, const std::vector<TensorDecl>& tensors) {
  // Contiguous layout in insertion order: the reference reader rejects gaps between tensors.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const TensorDecl& e : tensors) {
    h[e.name] = {{"dtype", std::string(dtype_name(e.dtype))}, {"shape", e.shape}, {"data_offsets", {off, off + e.nbytes}}};
    off += e.nbytes;
  }
  std::string text = h.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // data section starts at a multiple of 8
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text;
}

uint64_t decl_bytes(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  uint64_t numel = 0, want = 0;
  if (!checked_numel(shape, &numel) || __builtin_mul_overflow(numel, dtype_size(dtype), &want))
    throw std::invalid_argument(cat("safetensors writer: tensor '", name, "': invalid shape ", shape_str(shape)));
  return want;
}

}  // namespace

// ---------------------------------------------------------------- TensorView

namespace {

// One thread that issues the read-ahead hints: MADV_WILLNEED on a file mapping submits the reads in
// the calling thread and can block until the device has queued them (most of the read time of a
// large tensor), so the thread that computes must not be the one that asks. At most kMaxQueued
// tensors wait; a hint beyond that is dropped (the tensor is then faulted in when it is used), so
// the reads never run far ahead of the computation and evict what it still needs.
class ReadAheadThread {
 public:
  static ReadAheadThread& get() {
    static ReadAheadThread* t = new ReadAheadThread();  // never destroyed: detached worker, process lifetime
    return *t;
  }
  void push(uintptr_t a, size_t n) {
    std::lock_guard<std::mutex> g(m_);
    if (q_.size() >= kMaxQueued) return;
    q_.emplace_back(a, n);
    cv_.notify_one();
  }

 private:
  static constexpr size_t kMaxQueued = 32;
  ReadAheadThread() {
    std::thread([this] {
      for (;;) {
        std::pair<uintptr_t, size_t> r;
        {
          std::unique_lock<std::mutex> g(m_);
          cv_.wait(g, [&] { return !q_.empty(); });
          r = q_.front();
          q_.pop_front();
        }
        (void)::madvise(reinterpret_cast<void*>(r.first), r.second, MADV_WILLNEED);  // a hint: failure changes nothing
      }
    }).detach();
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<uintptr_t, size_t>> q_;
};

}  // namespace

void read_ahead(const TensorView& t) {
  // A tensor of under 1 MiB is left to the page-fault readahead (128 KiB at a time: a few faults),
  // so a model whose tensors are all small (the tiny test models) pays nothing on every forward.
  constexpr size_t kMinBytes = size_t(1) << 20;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (!t.data || t.nbytes < kMinBytes) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(t.data) & ~(page - 1);
  const uintptr_t e = reinterpret_cast<uintptr_t>(t.data) + t.nbytes;
  ReadAheadThread::get().push(a, e - a);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at open: fits in 64 bits
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ---------------------------------------------------------------- SafetensorsFile

namespace {

// Maps a file read-only (its size in *size): a regular file of at least the 8-byte header length.
void* map_file(const fs::path& path, const std::string& file, uint64_t* size_out) {
  // note: O_NONBLOCK so that a FIFO given as a file is refused below instead of blocking the open
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) input_error("cannot open ", file, ": ", errno_str(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    input_error("cannot stat ", file, ": ", errno_str(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    input_error(file, ": expected a regular file, found ", kind_of(st.st_mode));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    input_error(file, ": file is ", size, " bytes, shorter than the 8-byte header length; not a safetensors file");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (m == MAP_FAILED) input_error("cannot map ", file, " (", size, " bytes): ", errno_str(map_errno));
  *size_out = size;
  return m;
}

// The header length of a mapped file of `size` bytes (the first 8 bytes, little-endian), checked
// against the file's size and kMaxHeaderBytes.
uint64_t header_length(const uint8_t* base, uint64_t size, const std::string& file) {
  const uint64_t n = read_le_u64(base);
  if (n > size - 8)
    input_error(file, ": header length ", n, " runs past end of file (file is ", size,
                " bytes, so at most ", size - 8, " header bytes); not a safetensors file or truncated");
  if (n > kMaxHeaderBytes)
    input_error(file, ": header length ", n, " is too large (limit ", kMaxHeaderBytes,
                " bytes); corrupt or not a safetensors file");
  return n;
}

// Where a file's data section lies: after the 8-byte length and the header of n bytes.
struct DataSection {
  const uint8_t* data;  // its first byte in the mapping
  uint64_t start;       // its offset in the file: 8 + n
  uint64_t size;        // its bytes: the file's size - start
  uint64_t file_size;
  uint64_t n;  // the header length
};

// The header's entries: the metadata (strings) into `metadata`, every tensor (checked against the
// data section's end) into `tensors`, in the header's order.
void read_entries(const json& h, const std::string& file, const std::string& fname, const DataSection& ds,
                  std::map<std::string, std::string>& metadata, std::vector<TensorView>& tensors) {
  for (const auto& [key, val] : h.items()) {
    if (key == "__metadata__") {
      if (!val.is_object())
        input_error(file, ": __metadata__ must be an object of strings, found ", json_kind(val));
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string())
          input_error(file, ": __metadata__ '", mk, "' must be a string, found ", json_kind(mv), " ", compact(mv));
        metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorView t;
    t.name = key;
    t.file = fname;
    uint64_t b = 0, e = 0;
    parse_entry(file, key, val, &t, &b, &e);
    if (e > ds.size)
      input_error(file, ": truncated file: tensor '", key, "' data_offsets [", b, ", ", e,
                  "] end past the data section (", ds.size, " bytes); expected a file of at least ",
                  ds.start + e, " bytes, found ", ds.file_size, " bytes");
    t.offset = static_cast<size_t>(b);
    t.nbytes = static_cast<size_t>(e - b);
    t.data = ds.data + b;
    tensors.push_back(std::move(t));
  }
}

// Sorts the tensors in data-offset order, then checks the exact coverage of the data section, as the
// reference reader demands: the first tensor begins at 0, each begins where the previous ended (no
// gap, no overlap), and the last ends at the end of the file. A header length off by a byte shifts
// every tensor by a byte (misaligned loads of wrong values) and shows up here as a gap or a short
// data section.
void check_coverage(const std::string& file, const DataSection& ds, std::vector<TensorView>& tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorView& a, const TensorView& b) {
    if (a.offset != b.offset) return a.offset < b.offset;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;
  });
  uint64_t covered = 0;              // bytes [0, covered) of the data section belong to tensors so far
  const TensorView* last = nullptr;  // the tensor that ends at `covered`
  for (const TensorView& t : tensors) {
    if (t.offset < covered)
      input_error(file, ": tensors '", last->name, "' [", last->offset, ", ", covered, ") and '", t.name, "' [", t.offset,
                  ", ", t.offset + t.nbytes, ") overlap in the data section; each byte must belong to at most one tensor");
    if (t.offset > covered)
      input_error(file, ": gap in the data section: bytes [", covered, ", ", t.offset, ") belong to no tensor (",
                  last ? cat("after '", last->name, "', before '") : std::string("before '"), t.name,
                  "'); expected tensors to cover the data section contiguously from offset 0 (header length ", ds.n,
                  " wrong, or a corrupt header)");
    if (t.nbytes > 0 || !last) last = &t;
    covered = t.offset + t.nbytes;
  }
  if (covered != ds.size)
    input_error(file, ": data section is ", ds.size, " bytes (file ", ds.file_size, " bytes - 8 - header length ", ds.n,
                "), but the tensors cover only ", covered, " bytes; expected them to end exactly at the end of the ",
                "file (header length too small, or data appended)");
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const fs::path& path) {
  const std::string file = path.string();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  uint64_t size = 0;
  f->map_ = map_file(path, file, &size);
  f->map_size_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);

  // 1. Header length, then the header text (only these pages are touched).
  const uint64_t n = header_length(base, size, file);
  f->header_.assign(reinterpret_cast<const char*>(base + 8), n);
  json h = parse_header(f->header_, file);
  if (!h.is_object())
    input_error(file, ": header is not a JSON object (found ", json_kind(h), ")");

  // 2. Entries: metadata and tensors. 3. Data-offset order and exact coverage of the data section.
  const DataSection ds{base + 8 + n, 8 + n, size - (8 + n), size, n};
  read_entries(h, file, path.filename().string(), ds, f->metadata_, f->tensors_);
  check_coverage(file, ds, f->tensors_);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------- Checkpoint

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    input_error("checkpoint ", dir.string(), ": expected a folder of .safetensors files, found ",
                fs::exists(dir, ec) ? "a file" : "nothing (no such path)");
  auto ck = std::make_unique<Checkpoint>();
  ck->dir_ = dir;

  // Adds every tensor of a shard, refusing names already owned by another shard.
  auto add_shard = [&](const fs::path& p) -> SafetensorsFile* {
    ck->files_.push_back(SafetensorsFile::open(p));
    SafetensorsFile* f = ck->files_.back().get();
    for (const TensorView& t : f->tensors()) {
      auto [it, inserted] = ck->by_name_.emplace(t.name, &t);
      if (!inserted)
        input_error("checkpoint ", dir.string(), ": tensor '", t.name, "' is in two shards, ",
                    it->second->file, " and ", t.file, "; expected exactly one");
    }
    return f;
  };

  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    const std::string ipath = index_path.string();
    json idx;
    try {
      idx = parse_json(read_file(index_path, kMaxInputFileBytes), ipath);
    } catch (const json::exception& e) {
      input_error(ipath, ": index is not JSON: ", e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map"))
      input_error(ipath, ": expected an object with a \"weight_map\" {tensor: shard file}, found ",
                  idx.is_object() ? "no weight_map" : json_kind(idx));
    const json& wm = idx["weight_map"];
    if (!wm.is_object())
      input_error(ipath, ": weight_map must be an object {tensor: shard file}, found ", json_kind(wm));
    if (wm.empty()) input_error(ipath, ": weight_map is empty; expected at least one tensor");
    std::map<std::string, std::vector<std::string>> by_shard;  // shard file -> tensors listed for it
    for (const auto& [name, shard] : wm.items()) {
      if (!shard.is_string())
        input_error(ipath, ": weight_map['", name, "'] must be a shard file name, found ", json_kind(shard));
      by_shard[shard.get<std::string>()].push_back(name);
    }
    for (const auto& [shard, names] : by_shard) {
      fs::path sp = dir / shard;
      if (!fs::is_regular_file(sp, ec))
        input_error(ipath, ": names shard '", shard, "' (for ", names.size(), " tensors, e.g. '", names.front(),
                    "') but ", sp.string(), " does not exist");
      SafetensorsFile* f = add_shard(sp);
      for (const std::string& name : names)
        if (!f->find(name))
          input_error(ipath, ": lists tensor '", name, "' in shard '", shard, "', but ", sp.string(),
                      " has no such tensor (it has ", f->tensors().size(), ")");
    }
    return ck;
  }

  const fs::path single = dir / "model.safetensors";
  if (fs::is_regular_file(single, ec)) {
    add_shard(single);
    return ck;
  }
  std::vector<fs::path> found;
  for (const auto& de : fs::directory_iterator(dir, ec))
    if (de.path().extension() == ".safetensors" && de.is_regular_file(ec)) found.push_back(de.path());
  if (ec) input_error("checkpoint ", dir.string(), ": cannot list folder: ", ec.message());
  std::sort(found.begin(), found.end());
  if (found.empty())
    input_error("checkpoint ", dir.string(), ": no .safetensors file in folder (expected model.safetensors, "
                "model.safetensors.index.json, or one *.safetensors)");
  if (found.size() > 1) {
    std::string list;
    for (const auto& p : found) list += (list.empty() ? "" : ", ") + p.filename().string();
    input_error("checkpoint ", dir.string(), ": several .safetensors files (", list,
                ") and no model.safetensors.index.json saying which tensor is in which");
  }
  add_shard(found.front());
  return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t)
    input_error("checkpoint ", dir_.string(), ": no tensor '", name, "' (checkpoint has ", by_name_.size(),
                " tensors)");
  return *t;
}

std::vector<const TensorView*> Checkpoint::tensors() const {
  std::vector<const TensorView*> v;
  v.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) v.push_back(t);
  return v;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : by_name_) n += t->nbytes;
  return n;
}

// ---------------------------------------------------------------- SafetensorsWriter

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            const void* data, size_t nbytes) {
  if (name == "__metadata__") throw std::invalid_argument("safetensors writer: '__metadata__' is not a tensor name");
  for (const Entry& e : entries_)
    if (e.name == name) throw std::invalid_argument(cat("safetensors writer: duplicate tensor name '", name, "'"));
  const uint64_t want = decl_bytes(name, dtype, shape);
  if (want != nbytes)
    throw std::invalid_argument(cat("safetensors writer: tensor '", name, "': ", nbytes, " bytes given, expected ",
                                    want, " (", dtype_name(dtype), " x ", shape_str(shape), ")"));
  const uint8_t* p = static_cast<const uint8_t*>(data);
  entries_.push_back({name, dtype, shape, std::vector<uint8_t>(p, p + nbytes)});
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                const std::vector<float>& v) {
  add(name, DType::f32, shape, v.data(), v.size() * sizeof(float));
}

void SafetensorsWriter::write(const fs::path& path) const {
  std::vector<TensorDecl> decls;
  for (const Entry& e : entries_) decls.push_back({e.name, e.dtype, e.shape, e.bytes.size()});
  const std::string prefix = safetensors_prefix(metadata_, decls);
  write_output_file(path, [&](const OutputSink& sink) {
    sink(prefix.data(), prefix.size());
    for (const Entry& e : entries_) sink(e.bytes.data(), e.bytes.size());
  });
}

void write_safetensors_streamed(const fs::path& path, const std::map<std::string, std::string>& metadata,
                                std::vector<TensorDecl> tensors, const TensorFill& fill, size_t chunk_bytes) {
  std::set<std::string> names;
  for (TensorDecl& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second)
      throw std::invalid_argument(cat("safetensors writer: tensor name '", t.name, "' reserved or repeated"));
    t.nbytes = decl_bytes(t.name, t.dtype, t.shape);
  }
  const std::string prefix = safetensors_prefix(metadata, tensors);
  chunk_bytes = std::max<size_t>(chunk_bytes / 8 * 8, 8);
  std::vector<uint8_t> buf(chunk_bytes);
  write_output_file(path, [&](const OutputSink& sink) {
    sink(prefix.data(), prefix.size());
    for (size_t i = 0; i < tensors.size(); ++i)
      for (uint64_t off = 0; off < tensors[i].nbytes; off += chunk_bytes) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes, tensors[i].nbytes - off));
        fill(i, off, buf.data(), n);
        sink(buf.data(), n);
      }
  });
}

// ---------------------------------------------------------------- file helpers

bool has_weight_files(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json")) return true;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

}  // namespace degen
