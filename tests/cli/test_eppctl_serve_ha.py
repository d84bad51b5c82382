"""Leader election (--ha-enable-leader-election) between `eppctl serve` replicas on one Lease of
the loopback API server (tests/helpers/fake_kube.py: GET, POST with 409 on exists, PUT with 409
on a moved resourceVersion). Durations are shortened so the failover fits a test; every wait is
bounded and every process is stopped by its pid."""
import signal
import time

from test_eppctl_serve_kube import fake_api, kube_serve, pods_on_loopback, wait_for  # noqa: F401

from fake_kube import NS, POOL, V1, pod  # noqa: E402

SERVING, NOT_SERVING = 1, 2
LEASE_S, RENEW_S, RETRY_S = 2.0, 1.5, 0.25
LEASE = "epp-%s-%s.llm-d.ai" % (NS, POOL)


def replica(kube_serve, api, name):
    return kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                      "--ha-enable-leader-election", "--leader-election-identity", name,
                      "--leader-election-lease-duration", "%gs" % LEASE_S,
                      "--leader-election-renew-deadline", "%gs" % RENEW_S,
                      "--leader-election-retry-period", "%gms" % (RETRY_S * 1000))


def readiness(s):
    return s.health("readiness")


def master_status(s):
    return s.metrics().get(("leader_election_master_status", (("name", LEASE),)))


def test_one_leader_serves_and_a_standby_takes_over(kube_serve, pods_on_loopback, fake_api):
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    a = replica(kube_serve, api, "epp-a")
    b = replica(kube_serve, api, "epp-b")
    wait_for(lambda: sorted([readiness(a), readiness(b)]) == [SERVING, NOT_SERVING], "exactly one leader",
             log=lambda: a.log() + b.log())
    leader, standby = (a, b) if readiness(a) == SERVING else (b, a)
    # Both alive and warm; only the leader is ready, on every readiness service name.
    for s in (leader, standby):
        assert s.health("liveness") == SERVING
        assert s.metric("epp_endpoints") == 2
    for service in ("", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert leader.health(service) == SERVING and standby.health(service) == NOT_SERVING, service
    assert master_status(leader) == 1
    assert master_status(standby) == 0
    with api.lock:
        holder = api.leases[LEASE]["spec"]["holderIdentity"]
    assert holder == ("epp-a" if leader is a else "epp-b")
    time.sleep(3 * RETRY_S)  # renewals keep the standby out
    assert readiness(standby) == NOT_SERVING

    # The leader dies without releasing (SIGKILL): the standby takes over once the lease has not
    # been renewed for its duration, at its next try.
    killed = time.monotonic()
    leader.proc.kill()
    leader.proc.wait()
    wait_for(lambda: readiness(standby) == SERVING, "the standby leading", timeout=LEASE_S + 10, log=standby.log)
    took = time.monotonic() - killed
    assert took <= LEASE_S + RETRY_S * 1.2 + 1.0, took  # lease duration + one (jittered) retry period, + polling
    assert master_status(standby) == 1
    assert "is the leader" in standby.log()
    with api.lock:
        assert api.leases[LEASE]["spec"]["leaseTransitions"] >= 1
    print("failover after SIGKILL: %.2f s (lease %.1f s, retry %.2f s)" % (took, LEASE_S, RETRY_S))


def test_sigterm_releases_the_lease(kube_serve, pods_on_loopback, fake_api):
    """On SIGTERM the leader gives the Lease up before draining: the standby leads within a retry
    period, not after the lease duration."""
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    a = replica(kube_serve, api, "epp-a")
    wait_for(lambda: readiness(a) == SERVING, "the first replica leading", log=a.log)
    b = replica(kube_serve, api, "epp-b")
    time.sleep(2 * RETRY_S)
    assert readiness(b) == NOT_SERVING
    stopped = time.monotonic()
    a.signal(signal.SIGTERM)
    wait_for(lambda: readiness(b) == SERVING, "the standby leading after the release", timeout=10, log=b.log)
    took = time.monotonic() - stopped
    assert a.wait(timeout=40) == 0
    assert "released by epp-a" in a.log()
    assert took < LEASE_S, took  # the release, not the expiry
    print("takeover after SIGTERM: %.2f s" % took)


def test_leader_election_errors(eppctl, fake_api):
    api = fake_api(V1, 8000)
    base = ["serve", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--kube-api-server", api.url,
            "--ha-enable-leader-election"]
    r = eppctl(*base, "--endpoint", "10.0.0.1:8000=none", timeout=30)
    assert r.returncode == 2 and "--ha-enable-leader-election needs --pool-name" in r.stderr, r.stderr
    r = eppctl(*base, "--pool-name", POOL, "--leader-election-renew-deadline", "20s", timeout=30)
    assert r.returncode == 2 and "--leader-election-renew-deadline < --leader-election-lease-duration" in r.stderr, r.stderr
