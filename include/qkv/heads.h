// Every layer and head of a text model (every attention group of it) ranked by the weight a
// token or word A of a text puts on a token or word B — the probing of Clark et al. 2019,
// "What does BERT look at?" (§3: a word split into several tokens attends with the mean of
// its tokens' rows and is attended to with the sum of its tokens' columns). Over several
// probes (sentence, A, B) the heads are ranked by their mean weight. `qkv heads` and
// Python's qkv.heads are front ends of rank_heads.
//
//   auto model = qkv::models::load_model("models/sotu-gpt");
//   auto r = qkv::models::rank_heads(*model, {{"The animal didn't cross the street because it was tired",
//                                              "it", "animal"}});
//   r.heads[0]  // the heaviest: its group, layer, head and weight (mean)
//
// A and B are names as `qkv run --token` reads them: a token (exactly, or without the mark
// its tokenizer adds: "Ġ", "▁", "##"), a word of several tokens ("animal" for GPT-2's
// "Ġanim" "al"), NAME@N for the N-th occurrence (from 1). A group that lacks A among its
// queries or B among its keys (the date translator's encoder has no decoder tokens) is
// skipped, and said so in the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/model_registry.h"

namespace qkv::models {

// One sentence and the pair whose attention is measured in it.
struct HeadProbe {
  std::string text;
  std::string from;  // A: the token or word that attends (a query)
  std::string to;    // B: the token or word attended to (a key)
  // Where the probe came from, leading its error messages: "--file 'pairs.tsv' line 3",
  // "probes[2]". "" for a probe given alone: its messages name no place and speak of "the
  // text" (with a place, of "the sentence").
  std::string where;
};

// One group of one probe that has A among its queries and B among its keys.
struct HeadProbeGroup {
  std::string name;                           // as the registry names it: "self-attention", ...
  std::vector<std::string> query_tokens;      // (Lq)
  std::vector<std::string> key_tokens;        // (Lk)
  std::vector<std::int64_t> from_positions;   // A's query rows (consecutive): the weight is their mean
  std::vector<std::int64_t> to_positions;     // B's key columns (consecutive): the weight is their sum
  std::vector<std::vector<double>> weights;   // [layer][head]
};

// A group of one probe without A among its queries or B among its keys.
struct HeadProbeSkip {
  std::string group;
  std::string reason;  // "'-' is not among its queries", ... and ... "is not among its keys"
};

struct HeadProbeResult {
  std::vector<std::string> tokens;     // the input as the model reads it (the first group's queries)
  std::vector<HeadProbeGroup> groups;  // the groups with A and B, in the model's order
  std::vector<HeadProbeSkip> skipped;  // the others
};

// One head over every probe.
struct HeadWeights {
  std::string group;
  std::int64_t layer = 0, head = 0;  // 0-based
  std::vector<double> weights;       // per probe; NaN where its group was skipped
  double mean = 0, min = 0, max = 0;  // over the probes where its group had A and B
  std::int64_t count = 0;             // those probes
};

struct HeadRanking {
  std::vector<HeadProbeResult> probes;  // one per probe, in order
  std::vector<HeadWeights> heads;       // heaviest mean first; ties keep the order of groups, layers, heads
};

// What rank_heads refused names the input to change, so that a front end can point at its
// own option: the model (not a text model), a probe's text (the model cannot read it), its
// A (from) or its B (to) (not in the text, or NAME@0).
enum class HeadsInput { model, text, from, to };

class HeadsError : public Error {
 public:
  HeadsError(HeadsInput input, const std::string& message, ErrorKind kind = ErrorKind::value)
      : Error(message, kind), input_(input) {}
  HeadsInput input() const noexcept { return input_; }

 private:
  HeadsInput input_;
};

// The heads of `model` ranked over `probes` (at least one). Throws HeadsError for a model
// whose input is not a text and for a probe whose text the model refuses, or whose A or B
// is in no group (the message lists the text's tokens).
HeadRanking rank_heads(const Model& model, const std::vector<HeadProbe>& probes);

// What heads_json writes besides the ranking.
struct HeadsJsonOptions {
  // Each head's "min", "max", "lines" (the probes where its group had A and B) and
  // "weights" (per probe; null where its group was skipped): over several probes.
  bool per_probe = false;
  std::string file;                 // the probes' file, as "file"; "" = none
  std::vector<std::int64_t> lines;  // each probe's line of it, as "line"; empty = none
};

// The ranking as one line of JSON, the one shape `qkv heads --json` writes and Python's
// qkv.heads returns (docs/heads.md): {"model_type", "description", ["file",] "probes": [{
// ["line",] "text", "from", "to", "tokens", "groups": [{"name", ["query_tokens",]
// ["key_tokens",] "from_positions", "to_positions"}], "skipped": [{"group", "reason"}]}],
// "heads": [{"rank" (from 1), "group", "layer", "head", "weight" (the mean over the probes),
// ["min", "max", "lines", "weights"]}]}. Text that is not UTF-8 is replaced (U+FFFD).
std::string heads_json(const Model& model, const std::vector<HeadProbe>& probes, const HeadRanking& ranking,
                       const HeadsJsonOptions& options = {});

}  // namespace qkv::models
