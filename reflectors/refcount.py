"""Which reflected pods reference which Secrets/ConfigMaps: the pure bookkeeping behind GUIDE §8.

A remote copy exists while at least one non-terminal reflected pod references its local object, so the
configuration reflector asks this index two questions: "is anything still using X?" (keep or delete the
copy) and "who is waiting for X?" (re-queue those pods when X appears). No I/O, no clocks.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Final, NamedTuple

# Distinct reference sets kept for sharing (oldest forgotten first): pods of one template reference the
# same objects, every pod at least its namespace's kube-root-ca.crt.
SHARED_SETS: Final = 1024


class ObjectRef(NamedTuple):
    """A referenced object by its LOCAL identity: kind ("Secret" or "ConfigMap"), namespace, name."""

    kind: str
    namespace: str
    name: str

    def key(self) -> str:
        """Work-queue key, ``Secret|ns|name`` (``|`` cannot appear in Kubernetes names)."""
        return f"{self.kind}|{self.namespace}|{self.name}"

    @classmethod
    def from_key(cls, key: str) -> ObjectRef:
        kind, namespace, name = key.split("|", 2)
        return cls(kind, namespace, name)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@functools.lru_cache(maxsize=SHARED_SETS)
def _shared(refs: frozenset[ObjectRef]) -> frozenset[ObjectRef]:
    """One object per distinct reference set (the first one seen): each pod's own set and refs cost
    ~0.4 KB at 10,000 pods. A frozenset is immutable, so sharing it is safe."""
    return refs


def _namespace_of(pod_key: str) -> str:
    return pod_key.split("/", 1)[0]


class RefIndex:
    """pod key ("ns/name") -> referenced objects, the reverse map, and pods waiting for missing objects."""

    def __init__(self) -> None:
        self._by_pod: dict[str, frozenset[ObjectRef]] = {}
        self._by_obj: dict[ObjectRef, set[str]] = {}
        self._waiting_by_pod: dict[str, frozenset[ObjectRef]] = {}
        self._waiting_by_obj: dict[ObjectRef, set[str]] = {}

    # ------------------------------------------------------------------------------------------ writes

    def set_pod(self, pod_key: str, refs: Iterable[ObjectRef]) -> frozenset[ObjectRef]:
        """Record the pod's references (replacing earlier ones); returns objects nothing references now."""
        new = _shared(frozenset(refs))
        old = self._by_pod.get(pod_key, frozenset())
        if new:
            self._by_pod[pod_key] = new
        else:
            self._by_pod.pop(pod_key, None)
        for obj in new - old:
            self._by_obj.setdefault(obj, set()).add(pod_key)
        return self._unlink(pod_key, old - new)

    def drop_pod(self, pod_key: str) -> frozenset[ObjectRef]:
        """Forget the pod (deleted or terminal); returns the objects no longer referenced by any pod."""
        self.set_waiting(pod_key, ())
        return self._unlink(pod_key, self._by_pod.pop(pod_key, frozenset()))

    def set_waiting(self, pod_key: str, objs: Iterable[ObjectRef]) -> None:
        """The objects this pod still waits for (replacing the earlier set; empty: waits for nothing)."""
        new = frozenset(objs)
        old = self._waiting_by_pod.pop(pod_key, frozenset())
        if new:
            self._waiting_by_pod[pod_key] = new
        for obj in old - new:
            pods = self._waiting_by_obj.get(obj)
            if pods is not None:
                pods.discard(pod_key)
                if not pods:
                    del self._waiting_by_obj[obj]
        for obj in new - old:
            self._waiting_by_obj.setdefault(obj, set()).add(pod_key)

    def take_waiting(self, obj: ObjectRef) -> frozenset[str]:
        """The pods waiting for ``obj``, which now stop waiting for it (they are about to be re-queued)."""
        pods = frozenset(self._waiting_by_obj.pop(obj, ()))
        for pod_key in pods:
            rest = self._waiting_by_pod.get(pod_key, frozenset()) - {obj}
            if rest:
                self._waiting_by_pod[pod_key] = rest
            else:
                self._waiting_by_pod.pop(pod_key, None)
        return pods

    def drop_namespace(self, namespace: str) -> None:
        """Forget every pod of ``namespace`` (its reflection stopped): nothing is returned for deletion."""
        for pod_key in {k for k in (*self._by_pod, *self._waiting_by_pod) if _namespace_of(k) == namespace}:
            self.drop_pod(pod_key)

    def _unlink(self, pod_key: str, objs: Iterable[ObjectRef]) -> frozenset[ObjectRef]:
        released: set[ObjectRef] = set()
        for obj in objs:
            pods = self._by_obj.get(obj)
            if pods is None:
                continue
            pods.discard(pod_key)
            if not pods:
                del self._by_obj[obj]
                released.add(obj)
        return frozenset(released)

    # ------------------------------------------------------------------------------------------ reads

    def referenced(self, obj: ObjectRef) -> bool:
        return obj in self._by_obj

    def pods_referencing(self, obj: ObjectRef) -> frozenset[str]:
        return frozenset(self._by_obj.get(obj, ()))

    def pods_waiting_for(self, obj: ObjectRef) -> frozenset[str]:
        return frozenset(self._waiting_by_obj.get(obj, ()))

    def waited_for(self, obj: ObjectRef) -> bool:
        return obj in self._waiting_by_obj

    def refs_of(self, pod_key: str) -> frozenset[ObjectRef]:
        return self._by_pod.get(pod_key, frozenset())

    def tracks(self, pod_key: str) -> bool:
        return pod_key in self._by_pod

    def objects(self, namespace: str | None = None) -> frozenset[ObjectRef]:
        """Every referenced object (of one namespace if given)."""
        return frozenset(o for o in self._by_obj if namespace is None or o.namespace == namespace)

    def __len__(self) -> int:
        """Number of referenced objects."""
        return len(self._by_obj)
