"""pyepp.replay over a P/D pool: the same figures as eppctl replay --prefill-servers/--decode-servers."""
from pathlib import Path

import pytest

import pyepp


def test_replay_on_a_pd_pool_reports_the_disaggregated_requests(source_dir: Path) -> None:
    workload = {"groups": 4, "prompts_per_group": 3, "system_len": 0, "question_len": 2000, "output_len": 20, "rate": 4.0}
    pd_config = str(source_dir / "examples" / "configs" / "pd-disagg.yaml")
    r = pyepp.replay(workload, ["round-robin", pd_config], prefill_servers=1, decode_servers=2)
    rr, pd = r["policies"]
    assert rr["disaggregated_pool"] is False and rr["server_roles"] == ["", "", ""]
    assert pd["disaggregated_pool"] is True and pd["server_roles"] == ["prefill", "decode", "decode"]
    assert pd["completed"] == r["trace"]["requests"] and pd["disaggregated"] == pd["completed"]
    assert pd["kv_transfer_s_mean"] > 0 and pd["itl_s"]["p50"] > 0
    assert pd["requests_per_server"][0] == pd["disaggregated"], "every prefill stage on the prefill server"
    assert "P/D pool (1 prefill + 2 decode servers)" in pyepp.replay_text(r)
    with pytest.raises(pyepp.ConfigError, match="prefill_servers"):
        pyepp.replay(workload, ["round-robin"], prefill_servers=-1)
