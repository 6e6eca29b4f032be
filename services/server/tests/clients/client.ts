// Drives a Baton server through openapi-fetch typed by the types openapi-typescript
// generated from its /openapi.json (`./api.js`, beside this file once generated), as a user
// of those types would: an agent of every provider kind and a tool of every kind, a run, a
// message, the run's messages and events (the JSON page and the SSE stream), and a 409
// problem. Compiled with `tsc --strict`; every answer is checked and any surprise throws.
// Run by scripts/clients with BATON_URL and BATON_KEY set.

import createClient from "openapi-fetch";
import type { components, paths } from "./api.js";

type Schemas = components["schemas"];

function check(condition: boolean, what: string): asserts condition {
  if (!condition) {
    throw new Error(what);
  }
}

function env(name: string): string {
  const value = process.env[name];
  check(value !== undefined && value !== "", `${name} is not set`);
  return value;
}

const baseUrl = env("BATON_URL");
const headers = { authorization: `Bearer ${env("BATON_KEY")}` };
const client = createClient<paths>({ baseUrl, headers });

/** The body of an answer that must have `status`. */
function expect<T>(
  answer: { data?: T; error?: unknown; response: Response },
  status: number,
): T {
  const { data, error, response } = answer;
  check(
    response.status === status && data !== undefined,
    `expected ${status}, got ${response.status}: ${JSON.stringify(error)}`,
  );
  return data;
}

/** The run once it has `status`; fails after about 10 s. */
async function waitFor(runId: string, status: Schemas["RunStatus"]): Promise<void> {
  let seen = "";
  for (let i = 0; i < 200; i++) {
    const run = expect(
      await client.GET("/v1/runs/{run_id}", { params: { path: { run_id: runId } } }),
      200,
    );
    if (run.status === status) {
      return;
    }
    seen = run.status;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`run ${runId} is ${seen}, not ${status}`);
}

/** The frames of an SSE answer, until it ends: each frame's `event` and parsed `data`. */
async function frames(response: Response): Promise<{ event: string; data: Schemas["StreamData"] }[]> {
  check(response.body !== null, "an event stream has a body");
  const text = await response.text();
  const out: { event: string; data: Schemas["StreamData"] }[] = [];
  for (const block of text.split("\n\n")) {
    let event = "message";
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice("event: ".length);
      if (line.startsWith("data: ")) data.push(line.slice("data: ".length));
    }
    if (data.length > 0) {
      out.push({ event, data: JSON.parse(data.join("\n")) as Schemas["StreamData"] });
    }
  }
  return out;
}

async function main(): Promise<void> {
  // A tool of every kind.
  const httpTool = expect(
    await client.POST("/v1/tools", {
      body: {
        name: "ts_lookup_order",
        effect: "read",
        input_schema: { type: "object" },
        kind: { kind: "http", url: "https://tools.example.com/lookup" },
      },
    }),
    201,
  );
  check(httpTool.kind.kind === "http" && httpTool.kind.url.endsWith("/lookup"), "an http tool");
  const clientTool = expect(
    await client.POST("/v1/tools", {
      body: {
        name: "ts_ask_user",
        effect: "read",
        input_schema: { type: "object" },
        kind: { kind: "client" },
      },
    }),
    201,
  );
  check(clientTool.kind.kind === "client", "a client tool");

  // An agent of every provider kind; each reads back as the variant it was made as.
  const openai = expect(
    await client.POST("/v1/agents", {
      body: {
        name: "ts-openai",
        provider: { kind: "openai", base_url: "https://models.example.com/v1", model: "small" },
        tools: [httpTool.id, clientTool.id],
      },
    }),
    201,
  );
  const again = expect(
    await client.GET("/v1/agents/{agent_id}", { params: { path: { agent_id: openai.id } } }),
    200,
  );
  check(again.provider.kind === "openai" && again.provider.model === "small", "an openai agent");
  const agent = expect(
    await client.POST("/v1/agents", {
      body: {
        name: "ts-scripted",
        provider: {
          kind: "scripted",
          replies: [
            { content: "Hello from the script" },
            // Slow enough that the next message finds the run busy.
            { content: "Goodbye", delay_ms: 1500, complete_run: true },
          ],
        },
      },
    }),
    201,
  );
  check(agent.provider.kind === "scripted" && agent.provider.replies.length === 2, "a scripted agent");

  // A run with a first message, waiting for the first turn's reply.
  const created = expect(
    await client.POST("/v1/runs", { body: { agent_id: agent.id, message: "Hi", wait: 10 } }),
    201,
  );
  check(created.run.agent_id === agent.id && created.message?.content === "Hi", "the run");
  check(created.result?.outcome === "completed", JSON.stringify(created.result));
  check(created.result?.reply?.content === "Hello from the script", JSON.stringify(created.result));
  check(created.result?.run.status === "waiting", JSON.stringify(created.result));
  const runId = created.run.id;
  const path = { run_id: runId };

  // The next message starts turn 2; one more while it runs is a 409 problem.
  const posted = expect(
    await client.POST("/v1/runs/{run_id}/messages", {
      params: { path },
      body: { content: "Thanks", request_id: `ts-${runId}` },
    }),
    201,
  );
  check(
    posted.state === "started" && posted.turn === 2 && posted.message.role === "user",
    "turn 2",
  );
  const busy = await client.POST("/v1/runs/{run_id}/messages", {
    params: { path },
    body: { content: "Again?" },
  });
  check(busy.response.status === 409 && busy.error !== undefined, `409, not ${busy.response.status}`);
  check(
    busy.response.headers.get("content-type") === "application/problem+json",
    `${busy.response.headers.get("content-type")}`,
  );
  const problem: Schemas["Problem"] = busy.error;
  check(problem.code === "run_busy" && problem.status === 409, JSON.stringify(problem));
  // Or it waits in line: the turn ends the run, so it is never taken.
  const queued = expect(
    await client.POST("/v1/runs/{run_id}/messages", {
      params: { path },
      body: { content: "One more", strategy: "enqueue" },
    }),
    202,
  );
  check(queued.state === "queued" && queued.position === 1, JSON.stringify(queued));
  await waitFor(runId, "completed");

  // Its messages, in order, and nothing of the refused one.
  const messages = expect(
    await client.GET("/v1/runs/{run_id}/messages", { params: { path } }),
    200,
  );
  const said = messages.items.map((m) => `${m.role}: ${m.content}`);
  check(
    JSON.stringify(said) ===
      JSON.stringify(["user: Hi", "assistant: Hello from the script", "user: Thanks", "assistant: Goodbye"]),
    JSON.stringify(said),
  );

  // Its events as a JSON page (the operation also answers an event stream: the type of
  // its answer is a union of both), each told apart by its `type`.
  const page = expect(
    await client.GET("/v1/runs/{run_id}/events", { params: { path, query: { limit: 500 } } }),
    200,
  );
  check("events" in page, "a JSON page of events");
  const replies: string[] = [];
  page.events.forEach((e, i) => {
    check(e.version === i + 1 && e.stream === runId, `event ${i + 1}`);
    if (e.type === "model.completed") {
      const completed = e as Schemas["ModelCompletedEvent"];
      replies.push(completed.data.content ?? "");
    }
  });
  check(JSON.stringify(replies) === JSON.stringify(["Hello from the script", "Goodbye"]), JSON.stringify(replies));
  // A checkpoint may be saved after the run's end; nothing else comes after it.
  const end = page.events.findIndex((e) => e.type === "run.completed");
  check(end > 0, "the run completed");
  check(page.events.slice(end + 1).every((e) => e.type === "checkpoint.saved"), "after the end");

  // The same events as the SSE stream, which ends with the run; resumed after event 2.
  const stream = await client.GET("/v1/runs/{run_id}/events", {
    params: { path, header: { "Last-Event-ID": "2" } },
    headers: { accept: "text/event-stream" },
    parseAs: "stream",
  });
  check(stream.response.status === 200, `SSE: ${stream.response.status}`);
  const sse = await frames(stream.response);
  const durable = sse.filter((f) => f.event !== "message.delta");
  for (const [i, f] of durable.entries()) {
    const e = f.data as Schemas["RunEvent"];
    check(f.event === e.type && e.version === i + 3, `frame ${i}: ${f.event}`);
  }
  check(durable.some((f) => f.event === "run.completed"), "the stream reached the end");
  console.log(`client.ts: ok (${page.events.length} events, ${sse.length} frames)`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
