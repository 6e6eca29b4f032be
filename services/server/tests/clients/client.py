"""Drives a Baton server through the Python client that openapi-python-client generated
from its /openapi.json (the package `baton_client` on PYTHONPATH), as a user of that
client would: an agent of every provider kind and a tool of every kind, a run, a message,
the run's messages and events, and a 409 problem. Every answer is checked; any surprise
raises. Run by scripts/clients with BATON_URL and BATON_KEY set."""

import os
import time
import uuid

from baton_client import AuthenticatedClient
from baton_client.api.agents import create_agent, get_agent
from baton_client.api.events import list_run_events
from baton_client.api.messages import list_run_messages, post_run_message
from baton_client.api.runs import create_run, get_run
from baton_client.api.tools import create_tool
from baton_client.models import (
    Agent,
    CheckpointSavedEvent,
    ClientToolKind,
    CreateAgentBody,
    CreatedRun,
    CreateRunBody,
    EventsPage,
    HttpToolKind,
    MessagePage,
    MessageQueuedEvent,
    MessageRole,
    MessageStrategy,
    ModelCompletedEvent,
    NewTool,
    OpenAiProvider,
    PostedMessage,
    PostMessageBody,
    Problem,
    QueuedMessage,
    RunCompletedEvent,
    RunCreatedEvent,
    RunStatus,
    RunSummary,
    ScriptedProvider,
    ScriptedReply,
    Tool,
    TurnOutcome,
    ToolEffect,
    UnknownEvent,
)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def created(response, status, kind):
    """The parsed body of an answer that must have `status` and be a `kind`."""
    check(
        response.status_code == status,
        f"expected {status}, got {response.status_code}: {response.content!r}",
    )
    check(isinstance(response.parsed, kind), f"expected a {kind.__name__}: {response.parsed!r}")
    return response.parsed


def wait_for(client, run_id, status):
    """The run once it has `status`; fails after about 10 s."""
    for _ in range(200):
        run = created(get_run.sync_detailed(run_id, client=client), 200, RunSummary)
        if run.status == status:
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} is {run.status}, not {status}")


def main():
    client = AuthenticatedClient(
        base_url=os.environ["BATON_URL"], token=os.environ["BATON_KEY"], timeout=10.0
    )

    # A tool of every kind.
    http_tool = created(
        create_tool.sync_detailed(
            client=client,
            body=NewTool(
                name="py_lookup_order",
                description="Finds an order",
                effect=ToolEffect.READ,
                input_schema={"type": "object"},
                kind=HttpToolKind(kind="http", url="https://tools.example.com/lookup"),
            ),
        ),
        201,
        Tool,
    )
    check(isinstance(http_tool.kind, HttpToolKind), f"{http_tool.kind!r}")
    client_tool = created(
        create_tool.sync_detailed(
            client=client,
            body=NewTool(
                name="py_ask_user",
                effect=ToolEffect.READ,
                input_schema={"type": "object"},
                kind=ClientToolKind(kind="client"),
            ),
        ),
        201,
        Tool,
    )
    check(isinstance(client_tool.kind, ClientToolKind), f"{client_tool.kind!r}")

    # An agent of every provider kind; each reads back as the variant it was made as.
    openai = created(
        create_agent.sync_detailed(
            client=client,
            body=CreateAgentBody(
                name="py-openai",
                provider=OpenAiProvider(
                    kind="openai", base_url="https://models.example.com/v1", model="small"
                ),
                tools=[http_tool.id, client_tool.id],
            ),
        ),
        201,
        Agent,
    )
    again = created(get_agent.sync_detailed(openai.id, client=client), 200, Agent)
    check(isinstance(again.provider, OpenAiProvider), f"{again.provider!r}")
    check(again.provider.model == "small" and again.tools == [http_tool.id, client_tool.id], f"{again!r}")
    agent = created(
        create_agent.sync_detailed(
            client=client,
            body=CreateAgentBody(
                name="py-scripted",
                provider=ScriptedProvider(
                    kind="scripted",
                    replies=[
                        ScriptedReply(content="Hello from the script"),
                        # Slow enough that the next message finds the run busy.
                        ScriptedReply(content="Goodbye", delay_ms=1500, complete_run=True),
                    ],
                ),
            ),
        ),
        201,
        Agent,
    )
    check(isinstance(agent.provider, ScriptedProvider), f"{agent.provider!r}")
    check(len(agent.provider.replies) == 2, f"{agent.provider!r}")

    # A run with a first message, waiting for the first turn's reply.
    run = created(
        create_run.sync_detailed(
            client=client,
            body=CreateRunBody(agent_id=agent.id, message="Hi", request_id=str(uuid.uuid4()), wait=10),
        ),
        201,
        CreatedRun,
    )
    check(run.run.agent_id == agent.id and run.message.content == "Hi", f"{run!r}")
    check(run.result.outcome == TurnOutcome.COMPLETED, f"{run.result!r}")
    check(run.result.reply.content == "Hello from the script", f"{run.result!r}")
    check(run.result.run.status == RunStatus.WAITING, f"{run.result!r}")
    run_id = run.run.id

    # The next message starts turn 2; one more while it runs is a 409 problem.
    posted = created(
        post_run_message.sync_detailed(run_id, client=client, body=PostMessageBody(content="Thanks")),
        201,
        PostedMessage,
    )
    check(posted.turn == 2 and posted.message.role == MessageRole.USER, f"{posted!r}")
    busy = post_run_message.sync_detailed(run_id, client=client, body=PostMessageBody(content="Again?"))
    problem = created(busy, 409, Problem)
    check(busy.headers["content-type"] == "application/problem+json", f"{busy.headers!r}")
    check(problem.code == "run_busy" and problem.status == 409, f"{problem!r}")
    check(isinstance(problem.request_id, str) and problem.request_id, f"{problem!r}")
    # Or it waits in line: the turn ends the run, so it is never taken.
    queued = created(
        post_run_message.sync_detailed(
            run_id,
            client=client,
            body=PostMessageBody(content="One more", strategy=MessageStrategy.ENQUEUE),
        ),
        202,
        QueuedMessage,
    )
    check(queued.state == "queued" and queued.position == 1, f"{queued!r}")
    wait_for(client, run_id, RunStatus.COMPLETED)

    # Its messages, in order, and nothing of the refused one.
    page = created(list_run_messages.sync_detailed(run_id, client=client), 200, MessagePage)
    said = [(m.role, m.content) for m in page.items]
    check(
        said
        == [
            (MessageRole.USER, "Hi"),
            (MessageRole.ASSISTANT, "Hello from the script"),
            (MessageRole.USER, "Thanks"),
            (MessageRole.ASSISTANT, "Goodbye"),
        ],
        f"{said!r}",
    )

    # Its events, each parsed as the typed envelope of its type.
    events = created(list_run_events.sync_detailed(run_id, client=client, limit=500), 200, EventsPage)
    check([e.version for e in events.events] == list(range(1, len(events.events) + 1)), "versions")
    check(events.next_after == len(events.events), f"{events.next_after}")
    unknown = [e for e in events.events if isinstance(e, UnknownEvent)]
    check(not unknown, f"events of no known type: {unknown!r}")
    waiting = [e for e in events.events if isinstance(e, MessageQueuedEvent)]
    check(len(waiting) == 1 and waiting[0].data.content == "One more", f"{waiting!r}")
    first = events.events[0]
    check(isinstance(first, RunCreatedEvent) and first.data.agent_id == agent.id, f"{first!r}")
    # A checkpoint may be saved after the run's end; nothing else comes after it.
    ends = [i for i, e in enumerate(events.events) if isinstance(e, RunCompletedEvent)]
    check(len(ends) == 1, f"one run.completed: {ends!r}")
    after = events.events[ends[0] + 1 :]
    check(all(isinstance(e, CheckpointSavedEvent) for e in after), f"after the end: {after!r}")
    replies = [e.data.content for e in events.events if isinstance(e, ModelCompletedEvent)]
    check(replies == ["Hello from the script", "Goodbye"], f"{replies!r}")
    check(all(e.stream == run_id for e in events.events), "every event is of the run")
    print(f"client.py: ok ({len(events.events)} events)")


if __name__ == "__main__":
    main()
