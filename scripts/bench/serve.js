// serve(name, handle): the stdin command loop of the bench servers written in Node.js
// (ort_use_lite.js, use_pipeline.js). One command per line, split at whitespace;
// handle(words, line) returns the reply object (printed as one JSON line), or undefined
// for an unknown command. "quit" ends the loop; an empty line is ignored; an exception
// becomes {"error": message}, and the server keeps serving.
const readline = require('readline');

async function serve(handle) {
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of lines) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'quit') break;
    if (words[0] === '') continue;
    let reply;
    try {
      reply = await handle(words, line);
      if (reply === undefined) reply = { error: `unknown command '${line.trim()}'` };
    } catch (e) {
      reply = { error: e && e.message ? e.message : String(e) };
    }
    console.log(JSON.stringify(reply));
  }
  lines.close();
}

module.exports = { serve };
