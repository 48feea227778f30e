//! The local control plane behaves like a real cluster: objects can be created and
//! watched, kwok makes Deployments ready, and the garbage collector removes children of
//! deleted owners.

mod common;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_namespaced_object_can_be_created_and_watched() {
    let client = common::client().await;
    let ns = common::namespace(&client, "cp-watch").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut stream = watcher(
        api.clone(),
        watcher::Config::default().fields("metadata.name=watched"),
    )
    .applied_objects()
    .boxed();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "watched"}, "data": {"k": "v"}}))
            .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), stream.try_next())
        .await
        .expect("no watch event within 20s")
        .unwrap()
        .expect("watch stream ended");
    assert_eq!(seen.metadata.name.as_deref(), Some("watched"));
    assert_eq!(seen.data.unwrap()["k"], "v");
}

#[tokio::test]
async fn a_deployment_of_two_replicas_becomes_ready_through_kwok() {
    let client = common::client().await;
    let ns = common::namespace(&client, "cp-deploy").await;
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let ready = common::eventually(Duration::from_secs(60), "readyReplicas 2", || async {
        let d = api.get("web").await.ok()?;
        d.status?.ready_replicas.filter(|r| *r == 2)
    })
    .await;
    assert_eq!(ready, 2);
}

#[tokio::test]
async fn deleting_an_owner_removes_its_child_through_the_garbage_collector() {
    let client = common::client().await;
    let ns = common::namespace(&client, "cp-gc").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = api.create(&PostParams::default(), &owner).await.unwrap();
    let child: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": "child",
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.metadata.uid.unwrap(), "controller": true, "blockOwnerDeletion": true
            }]
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &child).await.unwrap();
    assert!(api.get_opt("child").await.unwrap().is_some());
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    common::eventually(
        Duration::from_secs(60),
        "child garbage-collected",
        || async {
            api.get_opt("child")
                .await
                .ok()
                .and_then(|c| if c.is_none() { Some(()) } else { None })
        },
    )
    .await;
}
