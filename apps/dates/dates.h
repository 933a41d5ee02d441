// The date task: dates as people write them -> ISO 8601, and the model qkv trains for it.
//
//   "saturday, NOVEMBER 21, 2026"  ->  "2026-11-21"
//   "二〇二六年十一月二十一日"        ->  "2026-11-21"
//
// The data (qkv::dates). Dates are proleptic Gregorian, 1900-01-01 .. 2099-12-31, numbered
// by day_index (0 for 1900-01-01). A pure hash of that index puts ~20% of the calendar in
// a held-out split, so a model is scored on dates it never saw in any format. Inputs come
// in 14 formats (English, numeric, Chinese); the English ones vary in casing and spacing
// the way typed text does. All randomness comes from qkv::Rng, so a seed gives the same
// pairs on every platform.
//
// The translator (qkv::models), qkv's embedded default model: an encoder–decoder
// Transformer (seq2seq.h) over the characters of dates::Vocabulary, trained by qkv itself
// on generated pairs and evaluated on held-out calendar dates it never saw.
//
//   DateTrainingOptions o;  o.steps = 3000;  o.out_dir = "out";
//   DateTrainingResult r = train_dates(o, train::progress_printer(std::cerr, true), &interrupted);
//   Seq2Seq model = Seq2Seq::load("out");
//   translate_dates(model, {"21 Nov 2026"})  ->  {"2026-11-21"}
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/distributed.h"
#include "qkv/options.h"
#include "qkv/rng.h"
#include "qkv/seq2seq.h"
#include "qkv/trainer.h"
#include "qkv/viz.h"

namespace qkv::dates {

struct Date {
  int year;   // 1900..2099 where a range applies
  int month;  // 1..12
  int day;    // 1..days in that month
  friend bool operator==(const Date&, const Date&) = default;
};

inline constexpr Date kFirstDate{1900, 1, 1};
inline constexpr Date kLastDate{2099, 12, 31};

bool is_leap_year(int year);             // Gregorian: divisible by 4, centuries only by 400
int days_in_month(int year, int month);  // month 1..12, else qkv::Error

// Days from kFirstDate to kLastDate inclusive: 200·365 + 49 leap days = 73049.
std::int64_t num_days();
// 0 for 1900-01-01; qkv::Error for a date that does not exist or lies outside the range.
std::int64_t day_index(const Date& d);
// The inverse of day_index; qkv::Error unless 0 <= index < num_days().
Date date_at(std::int64_t index);
// 0 = Monday .. 6 = Sunday (1900-01-01 was a Monday).
int weekday(const Date& d);
// "2026-11-21".
std::string to_iso(const Date& d);

// Whether d belongs to the held-out split: mix64 of its day index, ~20% of all dates.
// A pure function of the date, so training and held-out pairs never share a date.
bool is_held_out(const Date& d);
// Number of dates in the held-out split (14 556 of 73 049, 19.93%).
std::int64_t num_held_out();

// The input formats, shown for 2026-11-21 (a Saturday):
//    0 21 November 2026              7 Sat 21 Nov 2026
//    1 November 21, 2026             8 21.11.2026
//    2 Nov 21, 2026                  9 2026/11/21
//    3 21 Nov 2026                  10 2026-11-21
//    4 November 21st 2026           11 2026年11月21日
//    5 the 21st of November, 2026   12 2026年11月21日星期六
//    6 Saturday, November 21, 2026  13 二〇二六年十一月二十一日
inline constexpr int kNumFormats = 14;
inline constexpr int kMaxInputLength = 40;  // code points, any format and variation

// The plain form of `format` (0..kNumFormats-1), as in the table above. Format 11 and 12
// never zero-pad month and day ("2026年1月5日"), as Chinese writing does not.
std::string format_date(const Date& d, int format);
// The same with the variation drawn from rng. English formats (0-7): the words
// lower-case, UPPER CASE, Title Case or mixed word by word (40% of draws); a doubled
// space between tokens, no space after a comma, a leading or trailing space (each
// occasionally). Formats 8 and 9: month and day without zero padding (20%). Formats 10-13
// are always plain. Weekday names always agree with the date.
std::string format_date(const Date& d, int format, Rng& rng);

// The date an ISO 8601 text "YYYY-MM-DD" names (exactly that form: 4-digit year, 2-digit
// month and day), or nullopt unless it is a calendar date in [kFirstDate, kLastDate].
std::optional<Date> parse_iso(std::string_view text);

// Whether `input` names the date d: "" when it does, else why not, as a phrase about the
// input ("the input names the month March, not 2026-11-21's"). The input is read in its family
// of forms, the way the formats above write dates, without guessing at what is missing:
//   Chinese (it has 年): exactly formats 11-13 of d (11 and 12 also with zero-padded
//     month and day), with or without d's weekday (星期X).
//   numeric (digits and one of . / -): DD.MM.YYYY, YYYY/MM/DD or YYYY-MM-DD (the
//     separator says the order), month and day with or without a leading zero.
//   English (anything else): words and numbers separated by spaces and commas, in any
//     order and letter case: one 4-digit year, one day (optionally with its ordinal
//     suffix: 21st), one month name or abbreviation, at most one weekday (which must be
//     d's), at most one "the" and one "of". Nothing else.
// Leading and trailing spaces are ignored. A date written some other way (MM/DD/YYYY,
// "21 Nov. 2026", a two-digit year) is not read: the check cannot tell what it names.
std::string disagreement(std::string_view input, const Date& d);

struct Pair {
  std::string input;   // format_date(date, format, rng)
  std::string output;  // to_iso(date)
};

// A date drawn uniformly from one split (held_out: the held-out split, else the training
// split), a format drawn uniformly, and that format's variation.
Pair sample_pair(Rng& rng, bool held_out);
// n distinct held-out dates (0 <= n <= num_held_out(), else qkv::Error), each with a
// uniformly drawn format and its variation; the same seed gives the same pairs.
std::vector<Pair> held_out_set(std::int64_t n, std::uint64_t seed);

// The character vocabulary of source and target: the four specials, then every code
// point any format can produce (letters of the English words in both cases, digits,
// " ,-./", the Chinese characters), in ascending code point order. One id per code point.
class Vocabulary {
 public:
  static constexpr std::int64_t pad = 0, bos = 1, eos = 2, unk = 3;

  static const Vocabulary& dates();

  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  // One id per code point; a code point outside the vocabulary -> unk. Text that is not
  // valid UTF-8 -> qkv::Error naming the byte offset.
  std::vector<std::int64_t> encode(std::string_view utf8) const;
  // The characters of ids, pad/bos/eos skipped and unk written "?"; qkv::Error for an id
  // outside [0, size()).
  std::string decode(std::span<const std::int64_t> ids) const;
  // Display form of one id: "<pad>", "<s>", "</s>", "<unk>", else the character itself
  // (the space stays " "; viewers that need it visible substitute their own glyph).
  std::string token(std::int64_t id) const;

 private:
  explicit Vocabulary(const std::vector<char32_t>& chars);
  std::vector<std::string> tokens_;                    // id -> display form (UTF-8)
  std::unordered_map<char32_t, std::int64_t> ids_;     // code point -> id (non-specials)
};

}  // namespace qkv::dates

namespace qkv::models {

// The architecture `qkv train dates` builds (the vocabulary size filled in).
Seq2SeqConfig date_model_config();

inline constexpr std::int64_t kDateOutputLength = 10;  // "YYYY-MM-DD"

struct DateTrainingOptions {
  std::int64_t steps = 1500;
  std::int64_t batch = 128;          // pairs per step
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 200;  // steps / 10 when it is not below steps
  double min_lr_ratio = 0.02;        // the cosine ends at peak_lr · this
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  double label_smoothing = 0.0;
  std::uint64_t seed = 0;            // weights and the order of the training pairs
  std::string out_dir;               // model.safetensors, config.json, checkpoint.safetensors
  bool resume = false;               // continue from out_dir/checkpoint.safetensors
  std::int64_t checkpoint_every = 500;  // steps; 0 = only at the end or on interruption
  std::int64_t stop_at = 0;          // > 0: stop after this step with a checkpoint, as `stop` does
  std::string precision = "f32";  // the products of training: f32, or bf16 (qkv/nn/precision.h)
  std::int64_t eval_size = 10000;    // held-out dates scored at the end
  std::uint64_t eval_seed = 2026;    // which held-out dates (fixed, so runs compare)
  std::string command;               // recorded in the weights' metadata
  Seq2SeqConfig model = date_model_config();
  // Data-parallel training over the ranks of `communicator` (qkv built with MPI, run under
  // mpirun) when it has more than one: every rank builds the same global batch of `batch`
  // pairs and trains on its contiguous share of the rows; the gradients are summed across
  // the ranks, each weighted by its share of the batch's counted targets, with reductions
  // started during the backward (distributed::GradientReducer), so every rank takes the
  // step single-process training would. The weights start as rank 0's (broadcast); rank 0
  // alone writes checkpoints and the model and reports progress (on_progress is called on
  // rank 0 only); every rank reads the checkpoint on --resume. All ranks must be given the
  // same options (checked: the same qkv::Error on every rank otherwise).
  const distributed::Communicator* communicator = nullptr;
};

// What train_dates returns: the loop's result (qkv/trainer.h: steps, interrupted, seconds,
// items_per_s() in tokens, checkpoint, reductions) and the held-out score.
struct DateTrainingResult : train::LoopResult {
  double exact_match = 0.0;        // on eval_size held-out dates (not measured when interrupted)
  std::int64_t num_parameters = 0;
  // `qkv train dates --json`: the loop's fields, then exact_match, held_out, parameters, out.
  std::string to_json(const DateTrainingOptions& options) const;
};

// Trains (or resumes). out_dir/checkpoint.safetensors (weights, AdamW moments, step) is
// written every checkpoint_every steps and when the loop ends: after `steps`, at stop_at,
// or when `stop` becomes true (checked once per step), by the one training loop
// (train::fit, task "dates"). Unless stopped early, the model is then scored on eval_size
// held-out dates and written as out_dir/model.safetensors + config.json. on_progress is
// called after every step (rank 0 only).
// The options of `qkv train dates` and qkv.train("dates"), declared once (qkv/options.h):
// steps, batch, lr, label_smoothing, seed, eval_size, and the run's out, resume,
// checkpoint_every, stop_at. out defaults to "dates-model".
const options::OptionSet<DateTrainingOptions>& date_training_options();

DateTrainingResult train_dates(const DateTrainingOptions& options,
                               const train::ProgressCallback& on_progress = {},
                               const std::atomic<bool>* stop = nullptr);

// The model committed under models/dates, compiled into the library
// (apps/dates/embedded_model.cpp).
// embedded_date_model() throws qkv::Error when this build has none.
bool has_embedded_date_model();
Seq2Seq embedded_date_model();

// Greedy translation of each input (batched): the model's answers, unchecked. An input
// that is empty, not UTF-8, holds a control character (Unicode category Cc: U+0000-U+001F,
// U+007F-U+009F) or is longer than the model's max_len throws qkv::Error naming it by its
// number (from 1) and saying what is wrong.
std::vector<std::string> translate_dates(const Seq2Seq& model, const std::vector<std::string>& inputs);

// One checked translation.
struct DateTranslation {
  std::string output;   // the model's answer; "" when the input was refused before the model ran
  std::string problem;  // "" when output is the date the input names; else why not
  bool ok() const { return problem.empty(); }
};

// translate_dates with every answer checked instead of trusted: an answer is accepted only
// when it is a calendar date in [1900-01-01, 2099-12-31] written YYYY-MM-DD and the input,
// read in its own family of forms, names that date (dates::disagreement). An input
// translate_dates would throw for is refused here instead (problem set, output empty), so
// one bad input does not stop the others. Problems are phrases such as "the model's answer
// '2023-02-31' is not a calendar date between 1900-01-01 and 2099-12-31" or "the model's
// answer is 2026-11-21; the input says Monday, but 2026-11-21 is a Saturday"; callers name
// the input.
std::vector<DateTranslation> translate_dates_checked(const Seq2Seq& model,
                                                     const std::vector<std::string>& inputs);

// One input's attention: the source and a target (the model's answer), run once more with
// teacher forcing so every probability is the one behind each output character. Tokens are
// display tokens (the space as "␣", so a label is never blank).
struct DateAttention {
  std::vector<std::string> source_tokens;  // S: the input's characters
  std::vector<std::string> target_in;      // T: <s> + output characters (the decoder's queries)
  std::vector<std::string> target_out;     // T: output characters + </s> (what each query predicts)
  Seq2SeqAttention attention;              // (1, H, Lq, Lk) per layer
};
DateAttention date_attention(const Seq2Seq& model, const std::string& input, const std::string& output);
// Its three groups for qkv::viz: encoder self-attention, decoder masked self-attention and
// cross-attention, every layer (H, Lq, Lk); subtitle "input  →  output"; the page opens on
// the cross-attention.
viz::AttentionView date_attention_view(const DateAttention& attention, const std::string& input,
                                       const std::string& output, const std::string& title);

// Exact-match accuracy of translate_dates on pairs; `outputs` receives the translations.
double evaluate_dates(const Seq2Seq& model, const std::vector<dates::Pair>& pairs,
                      std::vector<std::string>* outputs = nullptr);

}  // namespace qkv::models

namespace qkv::dates {
// Registers "qkv-seq2seq" (apps/dates/model_type.cpp) in the model registry; called by
// qkv::apps::register_model_types().
void register_date_model_type();
}  // namespace qkv::dates
