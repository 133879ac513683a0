import pytest

from topas.workflow import Agent, CallNode, SegmentRef, Task, Trace, Workflow, WorkflowError, template_of


def wf(nodes, agents=(("a", 10), ("b", 20))):
    return Workflow("w", {n: Agent(n, p) for n, p in agents}, {n.id: n for n in nodes})


def test_cycle_is_named():
    with pytest.raises(WorkflowError, match=r"cycle (x -> y -> x|y -> x -> y)"):
        wf([CallNode("x", "a", 1, 1, deps=("y",)), CallNode("y", "b", 1, 1, deps=("x",))])


@pytest.mark.parametrize(
    "node, msg",
    [
        (CallNode("x", "zz", 1, 1), "unknown agent 'zz'"),
        (CallNode("x", "a", 0, 1), "input_tokens must be positive"),
        (CallNode("x", "a", 1, -3), "output_tokens must be positive"),
        (CallNode("x", "a", 1, 1, deps=("nope",)), "dangling dependency 'nope'"),
    ],
)
def test_bad_nodes_give_one_line_errors(node, msg):
    with pytest.raises(WorkflowError, match=msg) as e:
        wf([node])
    assert "\n" not in str(e.value)


def test_history_must_come_from_upstream():
    with pytest.raises(WorkflowError, match="not from an upstream call"):
        wf([CallNode("x", "a", 1, 1), CallNode("y", "b", 1, 1, history=(SegmentRef("out", "x"),))])


def test_prompt_segments_prefix_history_fresh():
    w = wf([CallNode("x", "a", 5, 7), CallNode("y", "b", 3, 2, deps=("x",), history=(SegmentRef("out", "x"),))])
    segs = w.prompt_segments(4, "y")
    assert [s.id for s in segs] == ["agent:b", "t4:x:out", "t4:y:in"]
    assert [s.tokens for s in segs] == [20, 7, 3]
    assert w.prompt_tokens("y") == 30


def test_negative_prefix_and_arrival_rejected():
    with pytest.raises(WorkflowError, match="prefix_tokens must be positive"):
        Agent("a", 0)
    w = wf([CallNode("x", "a", 1, 1)])
    with pytest.raises(WorkflowError, match="negative arrival"):
        Task(0, -1.0, w, "w")


def test_trace_checks_templates_and_ids():
    w = wf([CallNode("x", "a", 1, 1)])
    with pytest.raises(WorkflowError, match="unknown template"):
        Trace("t", (Task(0, 0.0, w, "missing"),), {})
    with pytest.raises(WorkflowError, match="duplicate task id"):
        Trace("t", (Task(0, 0.0, w, "w"), Task(0, 1.0, w, "w")), {"w": template_of(w)})
