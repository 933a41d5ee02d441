// Declared options as CLI11 options (options_cli.h).
#include "options_cli.h"

#include "print.h"

namespace qkv::cli {

CLI::Validator validator_of(const options::Spec& spec, const std::string& description) {
  return CLI::Validator(
      [spec](std::string& text) -> std::string {
        try {
          spec.parse(text);
          return {};
        } catch (const options::OptionError& e) {
          return e.what();
        }
      },
      description, spec.name);
}

CliOption::CliOption(CLI::App* app, const options::Spec& spec) : spec_(&spec) {
  const std::string name = spec.cli_name();
  if (spec.type == options::Type::flag) {
    option_ = app->add_flag(name, flag_, spec.help);
    return;
  }
  std::string help = spec.help;
  if (spec.type != options::Type::text && spec.type != options::Type::path)
    help += " (" + spec.range_text() + ")";
  option_ = app->add_option(name, text_, help);
  if (spec.required) {
    option_->required();
  } else if (const std::string d = spec.default_text(); !d.empty()) {
    option_->default_str(d);
  }
  static const std::map<options::Type, const char*> kTypeNames = {
      {options::Type::integer, "INT"}, {options::Type::seed, "UINT"}, {options::Type::number, "FLOAT"},
      {options::Type::text, "TEXT"},   {options::Type::path, "PATH"}, {options::Type::choice, "CHOICE"}};
  option_->type_name(kTypeNames.at(spec.type));
  option_->check(validator_of(spec));
}

options::Value CliOption::value() const {
  if (spec_->type == options::Type::flag) return true;
  return spec_->parse(text_);
}

}  // namespace qkv::cli
