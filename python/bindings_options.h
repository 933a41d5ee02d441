// A declared option set (qkv/options.h) as Python keyword arguments, and the training tasks
// qkv.train(task, **options) runs. The names, ranges and defaults are the CLI's, from the
// same declaration: an unknown keyword is a TypeError naming it (an old spelling names the
// new one), a value of the wrong kind a TypeError, one out of range a ValueError; None takes
// the default.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bindings_arrays.h"
#include "bindings_training.h"
#include "qkv/error.h"
#include "qkv/options.h"

namespace qkv_python {

namespace py = pybind11;
namespace options = qkv::options;

// The Python value of one keyword as the declared option's Value: an int (or NumPy
// integer; not a bool) for integer and seed, a float, int or NumPy floating for number, a bool
// (or NumPy bool) for flag, a str for text and choice, a str or os.PathLike for path.
inline options::Value option_value(const options::Spec& spec, const py::handle& value) {
  const auto wrong_type = [&](const char* expected) {
    return options::OptionError(spec.name, std::string("must be ") + expected + ", got " + type_name(value),
                                qkv::ErrorKind::type);
  };
  const bool is_int = PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr());
  // The int's text, for a message: it may be beyond any C++ integer.
  const auto index = [&] {
    py::object n = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
    if (!n) throw py::error_already_set();
    return n;
  };
  switch (spec.type) {
    case options::Type::flag:
      if (!PyBool_Check(value.ptr()) && !py::isinstance(value, py::module_::import("numpy").attr("bool_")))
        throw wrong_type("a bool");
      return value.cast<bool>();
    case options::Type::integer: {
      if (!is_int) throw wrong_type("an int");
      const py::object n = index();
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
      if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
      if (overflow != 0 || v < spec.min || v > spec.max)
        throw options::OptionError(spec.name, "must be " + spec.range_text() + ", got " + py::str(n).cast<std::string>());
      return static_cast<std::int64_t>(v);
    }
    case options::Type::seed: {
      if (!is_int) throw wrong_type("an int");
      const py::object n = index();
      const unsigned long long v = PyLong_AsUnsignedLongLong(n.ptr());
      if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
        PyErr_Clear();  // negative or >= 2^64
        throw options::OptionError(spec.name, "must be " + spec.range_text() + ", got " + py::str(n).cast<std::string>());
      }
      return static_cast<std::uint64_t>(v);
    }
    case options::Type::number: {
      if (!PyFloat_Check(value.ptr()) && !is_int && !py::isinstance(value, py::module_::import("numpy").attr("floating")))
        throw wrong_type("a float");
      const double v = PyFloat_AsDouble(value.ptr());  // float, int (exact to 2^53) or NumPy's floats
      if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
      return v;
    }
    case options::Type::path: {
      py::object text = py::reinterpret_borrow<py::object>(value);
      if (!py::isinstance<py::str>(value) && py::hasattr(value, "__fspath__"))
        text = py::module_::import("os").attr("fspath")(value);
      if (!py::isinstance<py::str>(text)) throw wrong_type("a str or os.PathLike");
      const std::string s = text.cast<std::string>();
      if (s.find('\0') != std::string::npos) throw options::OptionError(spec.name, "contains a NUL character");
      return s;
    }
    case options::Type::text:
    case options::Type::choice:
      if (!py::isinstance<py::str>(value)) throw wrong_type("a str");
      return value.cast<std::string>();
  }
  throw wrong_type("a value");
}

// Runs body, prefixing an OptionError's message with "train lm: name: " (its kind kept).
template <class Body>
auto naming_options(const std::string& command, Body body) {
  try {
    return body();
  } catch (const options::OptionError& e) {
    throw qkv::Error(command + ": " + e.option() + ": " + e.what(), e.kind());
  }
}

// keywords (name -> value; None = the default) -> the target, every value checked and the
// set's checks run.
template <class T>
T options_from(const options::OptionSet<T>& set, const py::dict& keywords) {
  return naming_options(set.command(), [&] {
    T target = set.make();
    for (const auto& [key, value] : keywords) {
      const std::string name = py::str(key).cast<std::string>();
      const options::Spec* spec = options::find(set.specs(), name);
      if (spec == nullptr || !(spec->fronts & options::kPython))
        throw qkv::Error(set.command() + ": " + options::unknown_option_message(set.specs(), name, false),
                         qkv::ErrorKind::type);
      if (value.is_none()) continue;
      set.set(target, name, option_value(*spec, value));
    }
    set.finish(target);
    return target;
  });
}

// The declaration as Python data: [{"name", "type", "help", "default", "required", "min",
// "max" (integer), "low", "high", "low_open", "high_open" (number), "choices", "cli",
// "python"}], what the tests compare with the CLI's --help and what docstrings are made of.
inline py::list specs_list(const std::vector<options::Spec>& specs) {
  static const char* kTypes[] = {"flag", "integer", "seed", "number", "text", "path", "choice"};
  py::list out;
  for (const options::Spec& s : specs) {
    py::dict d;
    d["name"] = s.name;
    d["type"] = kTypes[static_cast<int>(s.type)];
    d["help"] = s.help;
    d["range"] = s.range_text();
    d["required"] = s.required;
    d["default"] = s.required ? py::none() : std::visit([](const auto& v) { return py::cast(v); }, s.default_value);
    if (s.type == options::Type::integer) {
      d["min"] = s.min;
      d["max"] = s.max;
    }
    if (s.type == options::Type::number) {
      d["low"] = s.low;
      d["high"] = s.high;
      d["low_open"] = s.low_open;
      d["high_open"] = s.high_open;
    }
    if (s.type == options::Type::choice) d["choices"] = s.choices;
    d["cli"] = (s.fronts & options::kCli) != 0;
    d["python"] = (s.fronts & options::kPython) != 0;
    d["old_names"] = s.old_names;
    out.append(d);
  }
  return out;
}

// Publishes a declaration for Python: the module's _option_sets[command] = (specs_list(set),
// parse(keywords) -> {name: value} of the Python options, every value checked, the defaults
// filled in and the set's checks run), for qkv.options(command) and the methods that take a
// command's options.
template <class T>
void def_options(py::module_& m, const options::OptionSet<T>& set) {
  if (!py::hasattr(m, "_option_sets")) m.attr("_option_sets") = py::dict();
  const options::OptionSet<T>* declared = &set;
  py::cpp_function parse([declared](const py::dict& keywords) {
    const T target = options_from(*declared, keywords);
    py::dict out;
    for (const auto& [name, value] : declared->values(target)) {
      // Python's options only: one the CLI alone takes (classify's show_images, which picks
      // the --html page's images) is neither a keyword nor a value here.
      const options::Spec* spec = options::find(declared->specs(), name);
      if (spec != nullptr && !(spec->fronts & options::kPython)) continue;
      out[py::str(name)] = std::visit([](const auto& v) { return py::cast(v); }, value);
    }
    return out;
  });
  m.attr("_option_sets")[py::str(set.command())] = py::make_tuple(specs_list(set.specs()), parse);
}

// Registers the training task of `set` ("train lm" -> "lm") for qkv.train: the module's
// _train_tasks[task] = (run(options, progress, command) -> result JSON, specs). `run(T,
// on_progress, stop)` trains with the GIL released and returns the result's JSON text.
template <class T, class Run>
void def_training(py::module_& m, const options::OptionSet<T>& set, Run run) {
  if (!py::hasattr(m, "_train_tasks")) m.attr("_train_tasks") = py::dict();
  const std::string task = set.command().substr(set.command().find(' ') + 1);
  const options::OptionSet<T>* declared = &set;
  py::cpp_function train(
      [declared, run](const py::dict& keywords, const py::object& progress, const std::string& command) {
        T o = options_from(*declared, keywords);
        if constexpr (requires { o.command; }) o.command = command;
        ProgressRelay relay(progress);
        return relay.run([&](const auto& on_progress, const auto* stop) { return run(o, on_progress, stop); });
      },
      py::arg("options"), py::arg("progress") = py::none(), py::arg("command") = "");
  m.attr("_train_tasks")[py::str(task)] = py::make_tuple(train, set.about());
  def_options(m, set);
}

}  // namespace qkv_python
