"""The WebSite operator in kopf: a Deployment and a Service named <name>-web, status
readyReplicas, url and observedGeneration. Written as kopf's documentation writes
operators: handlers on create and update, children adopted (ownerReferences) and applied
with the official client."""
import kopf
import kubernetes

kubernetes.config.load_kube_config()
apps = kubernetes.client.AppsV1Api()
core = kubernetes.client.CoreV1Api()
custom = kubernetes.client.CustomObjectsApi()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.posting.enabled = False  # no Events, as the other systems are measured
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    settings.execution.max_workers = 32


def children(name, namespace, spec):
    replicas = spec.get("replicas", 2)
    port = spec.get("port", 80)
    labels = {"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/managed-by": "kopf"}
    sel = {"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": name}
    dep = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"{name}-web", "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": sel},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [{
                     "name": "web", "image": spec["image"],
                     "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"cpu": "500m", "memory": "256Mi"}}}]}}},
    }
    svc = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-web", "labels": labels},
        "spec": {"type": spec.get("serviceType", "ClusterIP"), "selector": sel,
                 "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]},
    }
    return dep, svc, port


def create_or_patch(create, patch, namespace, obj):
    """Creates obj; if it already exists, patches it to match."""
    try:
        create(namespace, obj)
    except kubernetes.client.exceptions.ApiException as e:
        if e.status != 409:
            raise
        patch(obj["metadata"]["name"], namespace, obj)


@kopf.on.create("sre.example.com", "v1alpha1", "websites")
@kopf.on.update("sre.example.com", "v1alpha1", "websites")
@kopf.on.resume("sre.example.com", "v1alpha1", "websites")
def reconcile(spec, name, namespace, body, meta, patch, **_):
    dep, svc, port = children(name, namespace, spec)
    kopf.adopt([dep, svc], owner=body)
    create_or_patch(apps.create_namespaced_deployment, apps.patch_namespaced_deployment, namespace, dep)
    create_or_patch(core.create_namespaced_service, core.patch_namespaced_service, namespace, svc)
    patch.status["readyReplicas"] = 0
    patch.status["url"] = f"http://{name}-web.{namespace}.svc.cluster.local:{port}"
    patch.status["observedGeneration"] = meta.get("generation")
