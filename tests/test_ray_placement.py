"""Whether any node of a Ray cluster can take a sweep's task (:func:`harness.sweep.cluster.unplaceable`), read from
node lists shaped as ``ray.nodes()`` gives them, and the warning where none can. tests/test_ray.py meets the
warning on a real cluster."""

from __future__ import annotations

from typing import Any

from harness.sweep.cluster import Unplaced, unplaceable


def node(cpus: float, gpus: float = 0, alive: bool = True) -> dict[str, Any]:
    """One entry of ``ray.nodes()`` (Ray 2.60): a dead node keeps its resources, with ``Alive`` False."""
    resources = {"CPU": cpus, "memory": 8e9, "node:10.0.0.1": 1.0}
    if gpus:
        resources["GPU"] = gpus
    return {"NodeID": "ab12", "Alive": alive, "NodeManagerAddress": "10.0.0.1", "Resources": resources}


def test_a_node_with_the_cpus_and_gpu_asked_takes_the_task():
    assert unplaceable([node(2), node(8)], cpus=8, gpus=0, cpus_given=True) is None
    assert unplaceable([node(64), node(4, gpus=1)], cpus=4, gpus=1, cpus_given=False) is None


def test_too_few_cpus_on_every_node_names_what_is_asked_the_largest_node_and_the_options():
    assert unplaceable([node(2), node(1)], cpus=4, gpus=0, cpus_given=True) == (
        "warning: each Ray task asks for 4 CPUs, but no node of the Ray cluster has them (its largest of 2 alive "
        "nodes has 2 CPUs and 0 GPUs): the sweep waits until such a node joins; to run on the nodes there, lower "
        "--cpus-per-job")
    # the default --cpus-per-job comes from this machine's CPUs and --workers: both are named
    assert unplaceable([node(1)], cpus=2, gpus=0, cpus_given=False).endswith(
        "its largest of 1 alive node has 1 CPU and 0 GPUs): the sweep waits until such a node joins; to run on the "
        "nodes there, give --cpus-per-job (its default is this machine's CPUs over --workers), or more --workers")


def test_no_gpu_on_a_node_with_the_cpus_says_the_gpu_and_names_device_cpu():
    line = unplaceable([node(64), node(2, gpus=1)], cpus=4, gpus=1, cpus_given=True)
    # the largest is the one nearest to fit: the GPU node, though another has more CPUs
    assert line == ("warning: each Ray task asks for 4 CPUs and 1 GPU, but no node of the Ray cluster has them (its "
                    "largest of 2 alive nodes has 2 CPUs and 1 GPU): the sweep waits until such a node joins; to run "
                    "on the nodes there, lower --cpus-per-job, or --device cpu")
    assert "has 64 CPUs and 0 GPUs" in unplaceable([node(64), node(2)], cpus=4, gpus=1, cpus_given=True)


def test_a_dead_node_takes_nothing():
    assert "its largest of 1 alive node has 2 CPUs" in unplaceable([node(16, alive=False), node(2)], cpus=4, gpus=0,
                                                                   cpus_given=True)
    assert "(it has no alive node)" in unplaceable([node(16, alive=False)], cpus=1, gpus=0, cpus_given=True)
    assert "(it has no alive node)" in unplaceable([], cpus=1, gpus=0, cpus_given=True)


class Cluster:
    """``ray.nodes`` of a cluster whose nodes a test sets, counting the calls."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.nodes, self.calls = list(nodes), 0

    def __call__(self) -> list[dict[str, Any]]:
        self.calls += 1
        return self.nodes


def test_the_warning_is_said_again_while_no_node_can_take_a_task_and_not_once_one_joined():
    cluster = Cluster(node(2))
    once = Unplaced(cluster, cpus=4, gpus=0, cpus_given=True)  # the sweep's own: 60 s between reminders
    assert once() == unplaceable(cluster.nodes, 4, 0, True) and once() is None and cluster.calls == 1
    again = Unplaced(cluster, cpus=4, gpus=0, cpus_given=True, remind_s=0)
    assert again() and again()  # a reminder at each call past remind_s
    cluster.nodes.append(node(4))  # the autoscaler added a node that can take the task
    calls = cluster.calls
    assert again() is None and again() is None and cluster.calls == calls + 1  # and the cluster is not asked again


def test_a_cluster_that_cannot_list_its_nodes_gives_no_warning():
    def refused() -> list[dict[str, Any]]:
        raise ConnectionError("the head went away")

    assert Unplaced(refused, cpus=4, gpus=0, cpus_given=True)() is None
