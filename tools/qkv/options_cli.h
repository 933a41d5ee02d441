// A declared option set (qkv/options.h) as the options of a CLI11 subcommand: each option
// the CLI takes becomes --name, with its help, range and default in --help and its check on
// the value's text; after parsing, parse() makes the target from the set's defaults, sets
// what was given and runs the set's checks. A refused value or combination is a UsageError
// naming the option as the command line spells it (--patch-size).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "qkv/options.h"

namespace qkv::cli {

// A CLI11 check of an option's text by spec.parse (qkv/options.h), so "abc", "1.5", "",
// "nan" and values out of range are refused with the range in the message, as --help states
// it; `description` is what --help shows beside the type ("" for nothing).
CLI::Validator validator_of(const options::Spec& spec, const std::string& description = "");

// The CLI11 option for one declared option (stored as text, or a flag), and what was given.
class CliOption {
 public:
  CliOption(CLI::App* app, const options::Spec& spec);
  const options::Spec& spec() const { return *spec_; }
  bool given() const { return option_->count() > 0; }
  options::Value value() const;  // the given text parsed (a flag: true)

 private:
  const options::Spec* spec_;
  CLI::Option* option_ = nullptr;
  std::string text_;
  bool flag_ = false;
};

// Runs `body`, turning an OptionError into the UsageError of the option's CLI spelling.
template <class Body>
auto as_usage_errors(const std::vector<options::Spec>& specs, Body body) {
  try {
    return body();
  } catch (const options::OptionError& e) {
    const options::Spec* spec = options::find(specs, e.option());
    throw UsageError(spec != nullptr ? spec->cli_name() : "--" + e.option(), e.what());
  }
}

template <class T>
class CliOptions {
 public:
  CliOptions(CLI::App* app, const options::OptionSet<T>& set) : set_(&set) {
    options_.reserve(set.specs().size());
    for (const options::Spec& spec : set.specs())
      if (spec.fronts & options::kCli) options_.emplace_back(app, spec);
  }
  T parse() const {
    return as_usage_errors(set_->specs(), [&] {
      T target = set_->make();
      for (const CliOption& o : options_)
        if (o.given()) set_->set(target, o.spec().name, o.value());
      set_->finish(target);
      return target;
    });
  }
  const std::vector<options::Spec>& specs() const { return set_->specs(); }

 private:
  const options::OptionSet<T>* set_;
  std::vector<CliOption> options_;  // reserved: CLI11 holds pointers into each
};

}  // namespace qkv::cli
