"""What the collective-case generators share: the model block of a case and
writing it as validation/collectives/<id>.json."""
import json, os

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "collectives")


def model(cluster, gpus, ranks_per_node):
    """The model block: NCCL's own choice, one process a GPU, no NIC what-if."""
    return {"cluster": cluster, "nic_gbps": None, "gpus": gpus, "ranks_per_node": ranks_per_node,
            "gpus_per_process": 1, "algorithms": [], "protocol": None}


def write(case):
    """Writes the case under its id and returns the id."""
    with open(os.path.join(OUT_DIR, case["id"] + ".json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    return case["id"]
