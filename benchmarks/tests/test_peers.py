"""Self-checks of benchmarks/peers/sac.py's export into the peers file (no training, no SB3):
the SAC rows it writes are the ones the report then reads, the other systems' rows stay,
and exporting again replaces its own rows instead of adding a second copy.

    python -m pytest benchmarks/tests"""
import csv
import importlib.util
from pathlib import Path

from ez_robot.results import read_peers

HERE = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("benchmark_peers_sac", HERE / "peers" / "sac.py")
sac = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sac)


def _write(path: Path, columns, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _sac_row(seed: int, steps: int, score: float, cpu: float) -> dict:
    return {"task": "cartpole_swingup", "setting": "sb3-sac default, action repeat 8", "seed": seed,
            "env_steps": steps, "eval_mean": score, "eval_episodes": 10, "success_rate": "", "evaluation": "training",
            "date": "2026-12-08", "machine": "2-core x86_64 CPU", "source": f"benchmarks/peers/sac.py s{seed}",
            "cpu_minutes": cpu}


def test_export_writes_the_runs_as_sb3_sac_keeps_the_other_rows_and_replaces_its_own(tmp_path):
    results, peers = tmp_path / "sac_results.csv", tmp_path / "peers.csv"
    _write(results, sac.COLUMNS, [_sac_row(0, 10_000, 88.4, 0.15), _sac_row(0, 20_000, 200.8, 0.59),
                                  _sac_row(1, 10_000, 39.4, 0.15), _sac_row(1, 20_000, 357.9, 0.60)])
    other = {"system": "TD-MPC2", "task": "cartpole_swingup", "setting": "official", "seed": "", "env_steps": 100000,
             "score": 839, "score_std": "", "seeds": 3, "eval_episodes": "", "date": "", "machine": "",
             "source": "tdmpc2", "note": ""}
    _write(peers, sac.PEER_COLUMNS, [other])

    assert sac.export_peers(results, peers) == 4
    assert sac.export_peers(results, peers) == 4  # again: the same file, not a second copy

    rows = read_peers(peers)
    assert [r["system"] for r in rows] == ["TD-MPC2"] + ["SB3 SAC"] * 4
    assert rows[0]["score"] == 839.0
    ours = [(r["seed"], r["env_steps"], r["score"], r["note"]) for r in rows[1:]]
    # each run's CPU time goes on its last row only
    assert ours == [("0", 10_000, 88.4, ""), ("0", 20_000, 200.8, "0.6 CPU min"),
                    ("1", 10_000, 39.4, ""), ("1", 20_000, 357.9, "0.6 CPU min")]


def test_the_script_writes_the_columns_of_the_projects_peers_file():
    with open(HERE / "peers.csv", newline="") as f:
        assert tuple(next(csv.reader(f))) == sac.PEER_COLUMNS
