#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/dtype.h"
#include "io/byte_ranges.h"
#include "io/mapped_file.h"

// File layout (all little-endian), versions 2 and 3:
//   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
//   n_kv x       { string key, u32 value_type, value }
//   n_tensors x  { string name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32)
//   tensor data; each tensor at data_start + offset
// string = u64 length + bytes (no terminator); array = u32 elem_type + u64 count + elements.
// Version 1 used u32 counts and lengths; it is rejected.

namespace nanoserve {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
// Metadata values are widened to a GgufValue (~48 bytes) each, so their number is
// capped: 4M is ~8x the largest real vocabulary's token + merge + type arrays,
// and bounds the parsed metadata to ~200 MB whatever the file claims.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 22;
// Smallest encodings, used to bound counts by the bytes left in the file.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// Prefixes context ("metadata 'x': ") to a parse error, keeping its code.
Status with_context(const Status& s, const std::string& context) {
  return Status(s.code(), context + s.message());
}

// Printable, bounded rendering of a name from the file for error messages.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (s.size() > 64) out += "...";
  return out;
}

std::optional<DType> dtype_from_ggml_type(uint32_t t) {
  switch (t) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 26: return DType::kI32;
    case 30: return DType::kBF16;
    case 39: return DType::kMXFP4;
    default: return std::nullopt;
  }
}

// ggml types that exist but that this build cannot compute with.
const char* unsupported_ggml_type_name(uint32_t t) {
  switch (t) {
    case 9: return "Q8_1";
    case 15: return "Q8_K";
    case 16: return "IQ2_XXS";
    case 17: return "IQ2_XS";
    case 18: return "IQ3_XXS";
    case 19: return "IQ1_S";
    case 20: return "IQ4_NL";
    case 21: return "IQ3_S";
    case 22: return "IQ2_S";
    case 23: return "IQ4_XS";
    case 24: return "I8";
    case 25: return "I16";
    case 27: return "I64";
    case 28: return "F64";
    case 29: return "IQ1_M";
    case 34: return "TQ1_0";
    case 35: return "TQ2_0";
    default: return nullptr;
  }
}

// Fixed encoded size of a scalar metadata type; 0 for string and array.
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

// Smallest encoding of one value of type t (bounds array counts).
uint64_t min_value_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 4 + 8;
  return scalar_size(t);
}

bool valid_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::kF64);
}

}  // namespace

// Reads one file image front to back. Every read is bounds-checked against the
// bytes left; errors name the field and its byte offset.
class GgufParser {
 public:
  GgufParser(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  Status parse(GgufFile* file);

 private:
  uint64_t remaining() const { return size_ - pos_; }

  Status error(uint64_t at, const std::string& field, const std::string& problem) const {
    return data_loss(format("%s at offset %" PRIu64 ": ", field.c_str(), at) + problem);
  }

  Status need(uint64_t n, const char* field) const {
    if (n > remaining()) {
      return error(
          pos_, field,
          format("needs %" PRIu64 " bytes but only %" PRIu64 " remain (file truncated at %" PRIu64 " bytes)",
                 n, remaining(), size_));
    }
    return Status::ok_status();
  }

  template <typename T>
  Status read(T* out, const char* field) {
    NS_RETURN_IF_ERROR(need(sizeof(T), field));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok_status();
  }

  Status read_string(std::string* out, const char* field);
  Status read_value(GgufType type, int depth, GgufValue* out);
  Status read_array(int depth, GgufValue* out);
  Status count_values(uint64_t n, uint64_t at, const char* field);

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_values_ = 0;  // metadata values parsed so far, against kMaxMetadataValues
};

Status GgufParser::read_string(std::string* out, const char* field) {
  const uint64_t at = pos_;
  uint64_t len = 0;
  NS_RETURN_IF_ERROR(read(&len, field));
  if (len > remaining()) {
    return error(at, field,
                 format("string length %" PRIu64 " runs past end of file (%" PRIu64 " bytes remain)", len,
                        remaining()));
  }
  out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
  pos_ += len;
  return Status::ok_status();
}

Status GgufParser::count_values(uint64_t n, uint64_t at, const char* field) {
  if (n > kMaxMetadataValues - n_values_) {
    return error(at, field, format("more than %" PRIu64 " metadata values in total", kMaxMetadataValues));
  }
  n_values_ += n;
  return Status::ok_status();
}

Status GgufParser::read_value(GgufType type, int depth, GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufType::kU8: {
      uint8_t x{};
      NS_RETURN_IF_ERROR(read(&x, "u8 value"));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kI8: {
      int8_t x{};
      NS_RETURN_IF_ERROR(read(&x, "i8 value"));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kU16: {
      uint16_t x{};
      NS_RETURN_IF_ERROR(read(&x, "u16 value"));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kI16: {
      int16_t x{};
      NS_RETURN_IF_ERROR(read(&x, "i16 value"));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kU32: {
      uint32_t x{};
      NS_RETURN_IF_ERROR(read(&x, "u32 value"));
      out->v = uint64_t{x};
      break;
    }
    case GgufType::kI32: {
      int32_t x{};
      NS_RETURN_IF_ERROR(read(&x, "i32 value"));
      out->v = int64_t{x};
      break;
    }
    case GgufType::kU64: {
      uint64_t x{};
      NS_RETURN_IF_ERROR(read(&x, "u64 value"));
      out->v = x;
      break;
    }
    case GgufType::kI64: {
      int64_t x{};
      NS_RETURN_IF_ERROR(read(&x, "i64 value"));
      out->v = x;
      break;
    }
    case GgufType::kF32: {
      float x{};
      NS_RETURN_IF_ERROR(read(&x, "f32 value"));
      out->v = double{x};
      break;
    }
    case GgufType::kF64: {
      double x{};
      NS_RETURN_IF_ERROR(read(&x, "f64 value"));
      out->v = x;
      break;
    }
    case GgufType::kBool: {
      const uint64_t at = pos_;
      uint8_t x{};
      NS_RETURN_IF_ERROR(read(&x, "bool value"));
      if (x > 1) return error(at, "bool value", format("byte %u is neither 0 nor 1", x));
      out->v = x == 1;
      break;
    }
    case GgufType::kString: {
      std::string s;
      NS_RETURN_IF_ERROR(read_string(&s, "string value"));
      out->v = std::move(s);
      break;
    }
    case GgufType::kArray: return read_array(depth + 1, out);
  }
  return Status::ok_status();
}

Status GgufParser::read_array(int depth, GgufValue* out) {
  const uint64_t at = pos_;
  if (depth > kMaxArrayDepth) {
    return error(at, "array", format("nested deeper than %d levels", kMaxArrayDepth));
  }
  uint32_t raw_type = 0;
  NS_RETURN_IF_ERROR(read(&raw_type, "array element type"));
  if (!valid_type(raw_type)) {
    return error(at, "array element type", format("unknown value type %u", raw_type));
  }
  const auto elem_type = static_cast<GgufType>(raw_type);
  const uint64_t count_at = pos_;
  uint64_t count = 0;
  NS_RETURN_IF_ERROR(read(&count, "array count"));
  if (count > remaining() / min_value_size(elem_type)) {
    return error(count_at, "array count",
                 format("%" PRIu64 " %s elements cannot fit in the %" PRIu64 " bytes left", count,
                        gguf_type_name(elem_type), remaining()));
  }
  NS_RETURN_IF_ERROR(count_values(count, count_at, "array count"));
  auto array = std::make_shared<GgufArray>();
  array->elem_type = elem_type;
  // count is bounded by both the bytes left and kMaxMetadataValues, so reserving is safe.
  array->items.resize(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    Status s = read_value(elem_type, depth, &array->items[static_cast<size_t>(i)]);
    if (!s.ok()) return with_context(s, format("array element %" PRIu64 ": ", i));
  }
  out->type = GgufType::kArray;
  out->v = std::shared_ptr<const GgufArray>(std::move(array));
  return Status::ok_status();
}

Status GgufParser::parse(GgufFile* file) {
  uint32_t magic = 0;
  NS_RETURN_IF_ERROR(read(&magic, "magic"));
  if (magic != kMagic) {
    return error(0, "magic",
                 format("expected \"GGUF\" (0x%08x), found 0x%08x: not a GGUF file", kMagic, magic));
  }
  uint32_t version = 0;
  NS_RETURN_IF_ERROR(read(&version, "version"));
  if (version == 1) {
    return error(4, "version",
                 "GGUF version 1 (32-bit counts) is not supported; convert the file to version 3");
  }
  if (version != 2 && version != 3) {
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
      return error(4, "version", "big-endian GGUF files are not supported");
    }
    return error(4, "version", format("unsupported GGUF version %u (expected 2 or 3)", version));
  }
  file->version_ = version;

  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  NS_RETURN_IF_ERROR(read(&n_tensors, "n_tensors"));
  NS_RETURN_IF_ERROR(read(&n_kv, "n_kv"));
  // Bound both counts by the bytes left, before anything is allocated from them.
  if (n_kv > remaining() / kMinKvBytes) {
    return error(16, "n_kv",
                 format("%" PRIu64 " metadata entries cannot fit in the %" PRIu64
                        " bytes left (each needs at least %" PRIu64 ")",
                        n_kv, remaining(), kMinKvBytes));
  }
  if (n_tensors > remaining() / kMinTensorInfoBytes) {
    return error(8, "n_tensors",
                 format("%" PRIu64 " tensors cannot fit in the %" PRIu64
                        " bytes left (each needs at least %" PRIu64 ")",
                        n_tensors, remaining(), kMinTensorInfoBytes));
  }

  // Metadata.
  std::unordered_set<std::string> keys;
  uint64_t alignment_at = 0;  // where general.alignment's type field is, for errors
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = pos_;
    std::string key;
    Status s = read_string(&key, "metadata key");
    if (!s.ok()) return with_context(s, format("metadata #%" PRIu64 ": ", i));
    const std::string context = "metadata '" + printable(key) + "': ";
    if (!keys.insert(key).second) {
      return with_context(error(key_at, "key", "duplicate key"), context);
    }
    const uint64_t type_at = pos_;
    uint32_t raw_type = 0;
    s = read(&raw_type, "value type");
    if (!s.ok()) return with_context(s, context);
    if (!valid_type(raw_type)) {
      return with_context(error(type_at, "value type", format("unknown value type %u", raw_type)), context);
    }
    if (key == "general.alignment") alignment_at = type_at;
    s = count_values(1, type_at, "value type");
    if (!s.ok()) return with_context(s, context);
    GgufValue value;
    s = read_value(static_cast<GgufType>(raw_type), 0, &value);
    if (!s.ok()) return with_context(s, context);
    file->kv_.emplace_back(std::move(key), std::move(value));
  }
  for (size_t i = 0; i < file->kv_.size(); ++i) file->kv_index_.emplace(file->kv_[i].first, i);

  // general.alignment must be known before tensor offsets can be checked.
  if (const GgufValue* a = file->find("general.alignment")) {
    const std::optional<int64_t> align = a->as_int();
    if (!align) {
      return error(alignment_at, "metadata 'general.alignment'",
                   std::string("expected an integer, found ") + gguf_type_name(a->type));
    }
    if (*align <= 0 || !std::has_single_bit(static_cast<uint64_t>(*align))) {
      return error(alignment_at, "metadata 'general.alignment'",
                   format("%" PRId64 " is not a positive power of two", *align));
    }
    file->alignment_ = static_cast<uint64_t>(*align);
  }

  // Tensor infos.
  std::unordered_set<std::string> names;
  std::vector<uint64_t> offset_field_at;  // byte offset of each tensor's `offset` field
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t name_at = pos_;
    GgufTensorInfo info;
    Status s = read_string(&info.name, "tensor name");
    if (!s.ok()) return with_context(s, format("tensor #%" PRIu64 ": ", i));
    const std::string context = "tensor '" + printable(info.name) + "': ";
    if (!names.insert(info.name).second) {
      return with_context(error(name_at, "name", "duplicate tensor name"), context);
    }
    const uint64_t dims_at = pos_;
    uint32_t n_dims = 0;
    s = read(&n_dims, "n_dims");
    if (!s.ok()) return with_context(s, context);
    if (n_dims > kMaxDims) {
      return with_context(
          error(dims_at, "n_dims", format("%u dimensions (GGUF allows at most %u)", n_dims, kMaxDims)),
          context);
    }
    uint64_t ne[kMaxDims] = {};
    int64_t numel = 1;
    // A zero dimension makes the count 0, but the other dimensions must still
    // multiply without overflow in any order, or shape arithmetic breaks later.
    int64_t nonzero_product = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = pos_;
      s = read(&ne[d], "ne");
      if (!s.ok()) return with_context(s, context);
      if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<int64_t>(ne[d]), &numel) ||
          (ne[d] != 0 &&
           __builtin_mul_overflow(nonzero_product, static_cast<int64_t>(ne[d]), &nonzero_product))) {
        return with_context(error(ne_at, format("ne[%u]", d),
                                  format("dimension %" PRIu64 " overflows the element count", ne[d])),
                            context);
      }
    }
    const uint64_t type_at = pos_;
    uint32_t ggml_type = 0;
    s = read(&ggml_type, "type");
    if (!s.ok()) return with_context(s, context);
    const std::optional<DType> dtype = dtype_from_ggml_type(ggml_type);
    if (!dtype) {
      if (const char* name = unsupported_ggml_type_name(ggml_type)) {
        return unimplemented(context + format("type %s (ggml type %u) at offset %" PRIu64 " is not supported",
                                              name, ggml_type, type_at));
      }
      return with_context(error(type_at, "type", format("unknown tensor type %u", ggml_type)), context);
    }
    info.dtype = *dtype;
    const DTypeInfo& dinfo = dtype_info(*dtype);
    // ne[0] (innermost) must hold whole blocks: a quantized row is a run of blocks.
    const uint64_t inner = n_dims > 0 ? ne[0] : 1;
    if (inner % static_cast<uint64_t>(dinfo.block_elems) != 0) {
      return with_context(
          error(dims_at + 4, "ne[0]",
                format("innermost dimension %" PRIu64 " is not a multiple of the %s block size %d", inner,
                       dinfo.name, dinfo.block_elems)),
          context);
    }
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / dinfo.block_elems, int64_t{dinfo.block_bytes}, &nbytes)) {
      return with_context(error(dims_at, "ne", format("%" PRId64 " elements overflow the byte size", numel)),
                          context);
    }
    info.nbytes = nbytes;
    info.shape.assign(n_dims, 0);
    for (uint32_t d = 0; d < n_dims; ++d) info.shape[n_dims - 1 - d] = static_cast<int64_t>(ne[d]);
    const uint64_t off_at = pos_;
    s = read(&info.offset, "offset");
    if (!s.ok()) return with_context(s, context);
    if (info.offset % file->alignment_ != 0) {
      return with_context(error(off_at, "offset",
                                format("data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                                       info.offset, file->alignment_)),
                          context);
    }
    file->tensors_.push_back(std::move(info));
    offset_field_at.push_back(off_at);
  }

  // The data section starts at the next multiple of the alignment. A file without
  // tensors may end before it.
  uint64_t data_start = 0;
  if (__builtin_add_overflow(pos_, file->alignment_ - 1, &data_start)) {
    return data_loss(
        format("data section: aligning offset %" PRIu64 " to %" PRIu64 " overflows", pos_, file->alignment_));
  }
  data_start -= data_start % file->alignment_;
  if (data_start > size_) {
    if (n_tensors > 0) {
      return error(pos_, "data section",
                   format("starts at %" PRIu64 ", past end of file (truncated at %" PRIu64 " bytes)",
                          data_start, size_));
    }
    data_start = size_;
  }
  file->data_offset_ = data_start;
  std::vector<ByteRange> ranges;  // [n_tensors] file bytes of each tensor's data
  ranges.reserve(file->tensors_.size());
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    const GgufTensorInfo& t = file->tensors_[i];
    uint64_t begin = 0;
    uint64_t end = 0;
    if (__builtin_add_overflow(data_start, t.offset, &begin) ||
        __builtin_add_overflow(begin, static_cast<uint64_t>(t.nbytes), &end) || end > size_) {
      return data_loss(format("tensor '%s': offset at offset %" PRIu64 ": data [%" PRIu64 " + %" PRIu64
                              ", +%" PRId64 " bytes) runs past end of file (truncated at %" PRIu64 " bytes)",
                              printable(t.name).c_str(), offset_field_at[i], data_start, t.offset, t.nbytes,
                              size_));
    }
    // Views are read through typed pointers (float*, uint16_t* for f16 scales),
    // so each tensor must start at its element's natural alignment. Block sizes
    // are all even, so 2-aligned quantized tensors keep every block 2-aligned.
    const uint64_t natural = (t.dtype == DType::kF32 || t.dtype == DType::kI32) ? 4 : 2;
    if ((reinterpret_cast<uintptr_t>(data_) + begin) % natural != 0) {
      return data_loss(format("tensor '%s': offset at offset %" PRIu64 ": data at file offset %" PRIu64
                              " is not aligned to %" PRIu64 " bytes for %s",
                              printable(t.name).c_str(), offset_field_at[i], begin, natural,
                              dtype_name(t.dtype)));
    }
    file->tensor_index_.emplace(t.name, i);
    ranges.push_back({begin, end});
  }
  // Tensors must not share bytes: a tensor placed over another (or every tensor
  // at offset 0) would read the other's weights as its own.
  if (const std::optional<Overlap> o = find_overlap(ranges)) {
    const size_t a = std::min(o->first, o->second), b = std::max(o->first, o->second);
    return data_loss(format("tensor '%s': offset at offset %" PRIu64 ": data [%" PRIu64 ", %" PRIu64
                            ") overlaps tensor '%s' at [%" PRIu64 ", %" PRIu64 ")",
                            printable(file->tensors_[b].name).c_str(), offset_field_at[b], ranges[b].begin,
                            ranges[b].end, printable(file->tensors_[a].name).c_str(), ranges[a].begin,
                            ranges[a].end));
  }
  return Status::ok_status();
}

StatusOr<std::shared_ptr<const GgufFile>> GgufFile::open(const std::string& path) {
  NS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::open(path));
  const uint8_t* data = mapped->data();
  const size_t size = mapped->size();
  auto parsed = parse(data, size, std::move(mapped));
  if (!parsed.ok()) return with_context(parsed.status(), "'" + path + "': ");
  return parsed;
}

StatusOr<std::shared_ptr<const GgufFile>> GgufFile::parse(const uint8_t* data, size_t size,
                                                          std::shared_ptr<void> owner) {
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->data_ = data;
  file->size_ = size;
  file->owner_ = std::move(owner);
  GgufParser parser(data, size);
  Status s = parser.parse(file.get());
  if (!s.ok()) return with_context(s, "gguf: ");
  return std::shared_ptr<const GgufFile>(std::move(file));
}

}  // namespace nanoserve
