"""The build log on Kubernetes: ``GET /jobs/{name}/buildlog?offset=N`` (the
service) answers the kaniko build Pod's container log, partial (whole lines)
while Building, whole afterwards; the Job builder's ``build_log``. On the real
kube-apiserver harness, with a stand-in for the kubelet's log (no kubelet
runs there); tests/test_k8s_real_progress.py watches a real kaniko build."""

from __future__ import annotations

import pytest
from helpers import write_notebook
from k8s_support import DIGEST, make_env, start_builder, wait_for

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import PODS
from jupyter_nbvalidation.core.model import Phase

try:
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness


@pytest.mark.k8s
@pytest.mark.asyncio
async def test_the_build_log_is_served_while_the_build_pod_runs(kube_apiserver, k8s_namespace, tmp_path, admin,
                                                                aio_admin):
    env = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", image_reuse=False)
    write_notebook(env.root / "nb.ipynb", ["x = 1"])
    build_log = ["INFO Retrieving image manifest\n", "INFO Unpacking rootfs\nINFO RUN pip install six"]

    async def container_log(the_pod, container, **query):  # the kubelet's part: kaniko's output so far
        assert container == obj.BUILD_CONTAINER and the_pod["metadata"]["name"].startswith(obj.build_job_name(name))
        return "".join(build_log)

    env.backend.children.container_log = container_log
    await env.engine.start()
    try:
        job = await env.submit(notebook={"path": "nb.ipynb"})
        name = job["metadata"]["name"]
        chunk = await env.service.build_log(name)  # no build Pod yet: empty, not complete (never a 404)
        assert (chunk.data, chunk.complete, chunk.next_offset) == (b"", False, 0)
        await start_builder(admin, env.ns, name)

        async def first() -> object:
            c = await env.service.build_log(name)
            return c if c.data else None

        chunk = await wait_for(first, what="the build log")
        assert (chunk.data, chunk.complete) == (b"INFO Retrieving image manifest\nINFO Unpacking rootfs\n",
                                               False)  # whole lines only
        offset = chunk.next_offset
        # what the Pod's log says of a credential is masked (the log is served as written otherwise)
        build_log[1] += "\nLooking in indexes: https://bob:hunter2@idx.example/simple\nCollecting six\n"
        chunk = await env.service.build_log(name, offset)
        assert chunk.data == (b"INFO RUN pip install six\nLooking in indexes: https://bob:***@idx.example/simple\n"
                              b"Collecting six\n")
        served = "".join(build_log).replace("hunter2", "***")
        assert not chunk.complete and chunk.next_offset == len(served.encode())
        build_log.append("INFO Pushed image")  # the last line, without a newline
        pods = await admin.request("GET", PODS.path(env.ns), query={
            "labelSelector": f"batch.kubernetes.io/job-name={obj.build_job_name(name)}"})
        (pod_,) = pods["items"]
        await harness.complete_pod(aio_admin, env.ns, pod_["metadata"]["name"], message=DIGEST,
                                   container=obj.BUILD_CONTAINER)
        await harness.complete_job(aio_admin, env.ns, obj.build_job_name(name))

        async def built() -> bool:
            return (await env.store.get(name))["status"]["phase"] != Phase.BUILDING

        await wait_for(built, what="the build to end")
        rest = await env.service.build_log(name, chunk.next_offset)
        assert (rest.data, rest.complete) == (b"INFO Pushed image", True)
        whole = await env.service.build_log(name)
        assert whole.data == "".join(build_log).replace("hunter2", "***").encode()
        assert whole.next_offset == len(whole.data) and b"hunter2" not in whole.data
    finally:
        await env.engine.stop()
