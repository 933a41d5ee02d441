// One declaration of a command's options — name, type, range, default, help and which front
// ends take each — from which the CLI builds its subcommand, its checks and its --help
// (tools/qkv/options_cli.cpp), and the Python module its keyword arguments and theirs
// (python/bindings_options.h). Declared once, so the two can never disagree on a name, a
// range or a default; the idea is llama.cpp's common_arg (each option declared once with the
// programs it applies to) and PyTorch's native_functions.yaml (one schema, a generated
// argument parser).
//
//   const OptionSet<LmTrainingOptions>& lm_training_options() {  // apps/language_model
//     static const OptionSet<LmTrainingOptions> set = [] {
//       OptionSet<LmTrainingOptions> s("train lm", "Train a GPT-2 language model on a text");
//       s.integer("layers", [](LmTrainingOptions& o) -> auto& { return o.model.n_layer; },
//                 1, 64, "Transformer blocks");
//       s.check([](const LmTrainingOptions& o) { ... throw OptionError("heads", "..."); });
//       return s;
//     }();
//     return set;
//   }
//
// Names are Python's (snake_case); the CLI spells them with dashes (patch_size ->
// --patch-size). A default is what a default-made target holds (OptionSet::make()).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "qkv/error.h"

namespace qkv::options {

enum class Type {
  flag,     // bool; on the command line a flag without a value
  integer,  // std::int64_t in [min, max]
  seed,     // std::uint64_t, any
  number,   // double, finite, in a range whose ends may be open
  text,     // std::string
  path,     // std::string naming a file or directory: never empty
  choice,   // std::string, one of `choices`
};

// The front ends that take an option.
enum Front : unsigned { kCli = 1u, kPython = 2u, kBoth = 3u };

// A value as a front end hands it over: bool (flag), std::int64_t (integer), std::uint64_t
// (seed), double (number), std::string (text, path, choice).
using Value = std::variant<bool, std::int64_t, std::uint64_t, double, std::string>;

// A refused option: its declared name ("batch") and why. The CLI prints "qkv train lm:
// --batch: <message>" and exits 2; Python raises ValueError, or TypeError for a value of the
// wrong kind (ErrorKind::type), "train lm: batch: <message>".
class OptionError : public Error {
 public:
  OptionError(std::string option, const std::string& message, ErrorKind kind = ErrorKind::value)
      : Error(message, kind), option_(std::move(option)) {}
  const std::string& option() const noexcept { return option_; }

 private:
  std::string option_;
};

struct Spec {
  std::string name;  // snake_case: patch_size (the CLI's --patch-size)
  Type type = Type::text;
  std::string help;
  std::int64_t min = 0, max = 0;         // integer: [min, max]
  double low = 0, high = 0;              // number: low < (or <=) x < (or <=) high
  bool low_open = false, high_open = false;
  std::vector<std::string> choices;      // choice
  unsigned fronts = kBoth;
  bool required = false;                 // no default: the command needs it
  Value default_value;                   // what OptionSet::make() holds; shown unless required
  // Names this option had before (old scripts): given, they are refused with a message
  // naming this one ("--embd is now --width").
  std::vector<std::string> old_names;

  std::string cli_name() const;          // "--patch-size"
  // "an integer in [1, 64]", "a finite number in (0, 1]", "one of learned, sincos", "a path".
  std::string range_text() const;
  std::string default_text() const;      // "128", "0.001", "learned", "" (text/path unset)
  // The CLI's text -> a Value of this option's type, checked (OptionError naming it).
  Value parse(const std::string& text) const;
  // Refuses a value of the wrong alternative or out of range (OptionError naming it).
  void check(const Value& value) const;
};

// A range of integers as messages and --help write it: the type's own limits as powers of
// two ("[1, 2^31)"), which say where the limit comes from, others as the largest value
// allowed ("[0, 65536]").
std::string integer_range(std::int64_t min, std::int64_t max);

// The option in `specs` named `name` (or nullptr), and the message for a name that is none
// of them: an old spelling names the new one, else the options there are.
const Spec* find(const std::vector<Spec>& specs, const std::string& name);
std::string unknown_option_message(const std::vector<Spec>& specs, const std::string& name,
                                   bool cli_spelling);

template <class T>
class OptionSet {
 public:
  // command: "train lm"; about: one line for the command's --help and docstrings.
  OptionSet(std::string command, std::string about, std::function<T()> make = [] { return T{}; })
      : command_(std::move(command)), about_(std::move(about)), make_(std::move(make)), defaults_(make_()) {}

  const std::string& command() const { return command_; }
  const std::string& about() const { return about_; }
  const std::vector<Spec>& specs() const { return specs_; }
  // A target holding every default (and what the command fixes, e.g. model = "sasrec").
  T make() const { return make_(); }

  // Declaring. `field` is a pointer to a member of T or a callable T& -> the field's
  // reference (for nested fields); each returns the Spec for further settings
  // (fronts, required, old_names).
  template <class Field>
  Spec& integer(std::string name, Field field, std::int64_t min, std::int64_t max, std::string help) {
    Spec s = base(std::move(name), Type::integer, std::move(help));
    s.min = min;
    s.max = max;
    return add<std::int64_t>(std::move(s), field);
  }
  template <class Field>
  Spec& seed(std::string name, Field field, std::string help) {
    return add<std::uint64_t>(base(std::move(name), Type::seed, std::move(help)), field);
  }
  template <class Field>
  Spec& number(std::string name, Field field, double low, bool low_open, double high, bool high_open,
               std::string help) {
    Spec s = base(std::move(name), Type::number, std::move(help));
    s.low = low;
    s.low_open = low_open;
    s.high = high;
    s.high_open = high_open;
    return add<double>(std::move(s), field);
  }
  template <class Field>
  Spec& flag(std::string name, Field field, std::string help) {
    return add<bool>(base(std::move(name), Type::flag, std::move(help)), field);
  }
  template <class Field>
  Spec& text(std::string name, Field field, std::string help) {
    return add<std::string>(base(std::move(name), Type::text, std::move(help)), field);
  }
  template <class Field>
  Spec& path(std::string name, Field field, std::string help) {
    return add<std::string>(base(std::move(name), Type::path, std::move(help)), field);
  }
  template <class Field>
  Spec& choice(std::string name, Field field, std::vector<std::string> choices, std::string help) {
    Spec s = base(std::move(name), Type::choice, std::move(help));
    s.choices = std::move(choices);
    return add<std::string>(std::move(s), field);
  }
  // An option whose value is not a field as it stands (positions "learned" | "sincos" is
  // the bool learned_positions): get reads the default from make(), set stores a value.
  template <class V>
  Spec& custom(Spec spec, std::function<V(const T&)> get, std::function<void(T&, const V&)> set) {
    spec.default_value = Value(get(defaults_));
    specs_.push_back(std::move(spec));
    setters_.push_back([set](T& t, const Value& v) { set(t, std::get<V>(v)); });
    getters_.push_back([get](const T& t) { return Value(get(t)); });
    return specs_.back();
  }
  static Spec choice_spec(std::string name, std::vector<std::string> choices, std::string help) {
    Spec s = base(std::move(name), Type::choice, std::move(help));
    s.choices = std::move(choices);
    return s;
  }

  // A check across options (heads divides dim) or a value derived from them, run by
  // finish() after every given option is set; throws OptionError naming the option to
  // change (or qkv::Error for a file that is not there).
  void check(std::function<void(T&)> rule) { rules_.push_back(std::move(rule)); }

  // Using. set() checks the value (OptionError) and stores it; finish() runs the checks.
  void set(T& target, const std::string& name, const Value& value) const {
    const Spec* spec = find(specs_, name);
    if (spec == nullptr) throw OptionError(name, unknown_option_message(specs_, name, false), ErrorKind::type);
    spec->check(value);
    setters_[static_cast<std::size_t>(spec - specs_.data())](target, value);
  }
  void finish(T& target) const {
    for (const auto& rule : rules_) rule(target);
  }
  // Every declared option's value in `target`, in declaration order (what a front end
  // hands back to a caller that asked for the options parsed).
  std::vector<std::pair<std::string, Value>> values(const T& target) const {
    std::vector<std::pair<std::string, Value>> out;
    for (std::size_t i = 0; i < specs_.size(); ++i) out.emplace_back(specs_[i].name, getters_[i](target));
    return out;
  }

 private:
  static Spec base(std::string name, Type type, std::string help) {
    Spec s;
    s.name = std::move(name);
    s.type = type;
    s.help = std::move(help);
    return s;
  }
  template <class V, class Field>
  Spec& add(Spec spec, Field field) {
    static_assert(std::is_same_v<std::remove_cvref_t<std::invoke_result_t<Field, T&>>, V>,
                  "the field's type must be the option type's (std::int64_t, double, ...)");
    spec.default_value = Value(std::invoke(field, defaults_));
    specs_.push_back(std::move(spec));
    setters_.push_back([field](T& t, const Value& v) { std::invoke(field, t) = std::get<V>(v); });
    // The accessors take T& (a field's reference, to set it); reading through one changes nothing.
    getters_.push_back([field](const T& t) { return Value(std::invoke(field, const_cast<T&>(t))); });
    return specs_.back();
  }

  std::string command_, about_;
  std::function<T()> make_;
  T defaults_;  // make_()'s, made once: each option's default is read from it
  std::vector<Spec> specs_;
  std::vector<std::function<void(T&, const Value&)>> setters_;
  std::vector<std::function<Value(const T&)>> getters_;
  std::vector<std::function<void(T&)>> rules_;
};

// Limits the declarations share.
inline constexpr std::int64_t kMaxSteps = 100000000;  // days of training beyond any useful run
inline constexpr std::int64_t kMaxInt = std::numeric_limits<std::int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace qkv::options
