// The toggle registry (DESIGN.md §5): one entry per `--config key=value` toggle, holding everything the
// rest of the tool needs to know about it: its text (values, help), how it parses, prints, compares
// and mixes for bisection, the layer kind it can be scoped to, whether it changes the floor class, and
// whether `bench --backend cuda --config` takes it. RunConfig's parse, print, validation and the
// bisection views (run_config.cpp) iterate this table; adding a toggle is an entry here (and its
// RunConfig field) plus the code that honours it.
// This header only forward-declares RunConfig so that run_config.h can include it.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace degen {

struct RunConfig;
struct LayerScope;
struct ModelConfig;
struct SamplingParams;
enum class Precision : uint8_t;

// What part of a run a toggle sets. Bisection's implicit good keeps the engine and sampling toggles
// of the bad configuration and resets the others; a prompt suite's case may set the sampling ones.
enum class ToggleKind : uint8_t {
  engine,    // how the engine is built and served: backend, precision, mtp, graphs, gemm, tp, batch, ...
  layer,     // the numerics of the layers: attn, gdn, ssm_dtype, conv_dtype, kv_dtype
  sampling,  // temp, top_p, top_k, min_p, rep_pen, presence_pen, seed (SamplingParams)
  fault,     // fault=NAME
};

// The layers a scoped toggle can act on (bisection narrows it to these).
enum class ToggleSite : uint8_t {
  none,         // not scopable to layers
  full_layers,  // attention toggles: full-attention layers
  linear_layers,  // GDN toggles: Gated DeltaNet layers
  per_fault,    // fault=NAME@...: the site of each fault (FaultInfo::site)
};

// What a non-default value does to the floor class (diag/floor_class.h) of a configuration.
enum class FloorNeutral : uint8_t {
  no,             // makes the path lower-precision than the reference: the bf16 class
  yes,            // precision-neutral (an algorithm of the same precision, sampling, faults, ...)
  gpu_reference,  // neutral on the fp32 reference on the GPU (backend=cuda,precision=ref) only
};

struct Toggle {
  Toggle(const char* key_, const char* values_, const char* meaning_, ToggleSite site_ = ToggleSite::none,
         FloorNeutral floor_ = FloorNeutral::no, bool bench_ = false, bool repeats_ = false)
      : key(key_), values(values_), meaning(meaning_), site(site_), floor(floor_), bench(bench_), repeats(repeats_) {}

  const char* key;
  const char* values;   // allowed values, for --help and error messages
  const char* meaning;  // one line of help
  ToggleSite site = ToggleSite::none;
  FloorNeutral floor = FloorNeutral::no;
  bool bench = false;    // `bench --backend cuda --config` accepts it (bench sets the others itself)
  bool repeats = false;  // may be given any number of times (fault)
  ToggleKind kind = ToggleKind::engine;

  // The value text (the part after '=' without its '@scope'); `scope` is nullptr when unscoped
  // (toggles that are not scoped never see one). InputError naming the key for a bad value.
  std::function<void(RunConfig&, const std::string& value, const LayerScope* scope)> parse;
  // Appends the canonical "key=value[@scope]" entries of the values that differ from the default.
  std::function<void(const RunConfig&, std::vector<std::string>& out)> print;
  // The toggle's whole value, defaults included, for comparing two configurations key by key
  // (differing_toggles); unset for fault, which bisection compares fault by fault.
  std::function<std::string(const RunConfig&)> fragment;
  // Copies the toggle (its field and any "given" flag) from `src` into `dst`.
  std::function<void(RunConfig& dst, const RunConfig& src)> take;
  // Scoped toggles: `dst` (holding good's value) takes bad's value on `layers` only.
  std::function<void(RunConfig& dst, const RunConfig& good, const RunConfig& bad, const std::vector<int>& layers,
                     const ModelConfig& cfg)>
      mix_layers;
  // The layer scopes the configuration gives this toggle (checked against the model), in order.
  std::function<std::vector<const LayerScope*>(const RunConfig&)> scopes;
  // Model-dependent checks of the value (tp against the head counts, top_k against the vocabulary).
  std::function<void(const RunConfig&, const ModelConfig&)> validate;

  bool scoped() const { return site != ToggleSite::none; }
  // Whether the floor class of `rc` ignores this toggle.
  bool floor_neutral(const RunConfig& rc) const;
};

// Every toggle, in canonical order (the order of RunConfig::str() and of bisection's keys).
const std::vector<Toggle>& toggles();
const Toggle* find_toggle(const std::string& key);  // nullptr when unknown
// `rc` with the toggles `which` selects set back to their defaults.
RunConfig without_toggles(const RunConfig& rc, const std::function<bool(const Toggle&)>& which);
// `base` with every toggle `which` selects that `over` sets (that `over`'s canonical text prints) taken
// from `over`: what applying that canonical text on top of `base` gives.
RunConfig with_toggles_of(const RunConfig& base, const RunConfig& over, const std::function<bool(const Toggle&)>& which);
// `base` with the sampling fields `over` sets (those that differ from the defaults) taken from `over`:
// a prompt case's sampling on top of the configuration's.
SamplingParams with_sampling_of(const SamplingParams& base, const SamplingParams& over);
// The keys of the toggles `which` selects, in canonical order, joined with ", ".
std::string toggle_keys(const std::function<bool(const Toggle&)>& which);

// The one precision vocabulary, that of `--config precision=`: ref, fp64, bf16, q8_0. `golden
// --precision` and `bench --precision` take the same words. With `note`, an older spelling is also
// taken (golden's fp32 for ref) and *note says which word replaces it; else nullopt for it.
std::optional<Precision> precision_from_word(const std::string& word, std::string* note = nullptr);
const char* precision_word(Precision p);
// precision_from_word without the older spellings, refusing any other word with the InputError of
// `--config precision=WORD`.
Precision precision_in_config(const std::string& word);

}  // namespace degen
