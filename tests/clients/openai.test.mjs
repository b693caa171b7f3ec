// The official `openai` npm client against `swarmflow serve`: what a user's
// tools would do. Usage: node openai.test.mjs SWARMFLOW PIPELINE
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import OpenAI from "openai";

const [cli, pipeline] = process.argv.slice(2);
const server = spawn(cli, ["serve", pipeline, "--http", "127.0.0.1:0", "--quiet"], { stdio: ["ignore", "ignore", "pipe"] });
let stderr = "";
const port = await new Promise((resolve, reject) => {
  server.stderr.on("data", (d) => {
    stderr += d;
    const m = /serving .* at http:\/\/[^:]+:(\d+)/.exec(stderr);
    if (m) resolve(Number(m[1]));
  });
  server.on("exit", (code) => reject(new Error(`swarmflow serve exited ${code}: ${stderr}`)));
  setTimeout(() => reject(new Error("swarmflow serve did not start: " + stderr)), 30000).unref();
});

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
try {
  const models = await client.models.list();
  assert.equal(models.data[0].id, "devil-1m");

  const whole = await client.completions.create({ model: "devil-1m", prompt: "DOG, n.", max_tokens: 16 });
  assert.equal(whole.object, "text_completion");
  assert.equal(whole.usage.completion_tokens, 16);
  assert.equal(whole.choices[0].finish_reason, "length");

  // Streamed: the chunks put together are the whole answer (greedy).
  const stream = await client.completions.create({ model: "devil-1m", prompt: "DOG, n.", max_tokens: 16, stream: true });
  let text = "";
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    chunks += 1;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(chunks, 17); // 16 tokens, then the finish

  const chat = await client.chat.completions.create({
    model: "devil-1m",
    messages: [{ role: "user", content: "CAT, n." }],
    max_tokens: 8,
    stream: true,
  });
  let content = "";
  let finish = null;
  for await (const chunk of chat) {
    content += chunk.choices[0].delta.content ?? "";
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(finish, "length");
  assert.ok(content.length > 0);

  // A bad request is an APIError with its status and message.
  await assert.rejects(
    client.completions.create({ model: "devil-1m", prompt: "x", max_tokens: -1 }),
    (e) => e.status === 400 && /max_tokens/.test(e.message),
  );
  console.log("openai client: models, completions, streamed completions, streamed chat and a 400: ok");
} finally {
  server.kill("SIGTERM");
}
const code = await new Promise((resolve) => server.on("exit", resolve));
assert.equal(code, 0, stderr);
