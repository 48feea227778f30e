//! Kinds named as kubectl names them, through the API server's discovery: the plural
//! (`websites`), the singular (`website`), the kind (`WebSite`), a short name (`ws`), each
//! alone or with its group (`websites.sre.example.com`) or version and group
//! (`websites.v1alpha1.sre.example.com`).

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::discovery::ApiResource;

/// One kind the API server serves, at its preferred version.
#[derive(Debug, Clone)]
pub(super) struct Served {
    pub ar: ApiResource,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub singular: String,
    pub verbs: Vec<String>,
}

impl Served {
    /// Whether `name` (lowercase, no group) names this kind.
    fn named(&self, name: &str) -> bool {
        self.ar.plural == name
            || self.singular == name
            || self.ar.kind.to_lowercase() == name
            || self.short_names.iter().any(|s| s == name)
    }

    /// Whether `suffix` (what follows the name's first dot) is its group, or its version
    /// and group.
    fn in_group(&self, suffix: &str) -> bool {
        suffix == self.ar.group || suffix == format!("{}.{}", self.ar.version, self.ar.group)
    }

    pub fn lists(&self) -> bool {
        self.verbs.iter().any(|v| v == "list")
    }
}

/// Every kind the cluster serves (subresources aside), at each group's preferred version.
pub(super) async fn discover(client: &kube::Client) -> anyhow::Result<Vec<Served>> {
    let mut versions = vec![(String::new(), "v1".to_string())];
    for g in client.list_api_groups().await?.groups {
        if let Some(v) = g
            .preferred_version
            .or_else(|| g.versions.into_iter().next())
        {
            versions.push((g.name.clone(), v.version));
        }
    }
    let lists = futures::stream::iter(versions)
        .map(|(group, version)| async move {
            let list = match group.is_empty() {
                true => client.list_core_api_resources(&version).await,
                false => {
                    client
                        .list_api_group_resources(&format!("{group}/{version}"))
                        .await
                }
            };
            (group, version, list)
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let mut out = Vec::new();
    for (group, version, list) in lists {
        // A group whose server is down (an aggregated API) is passed over, as kubectl does.
        if let Ok(list) = list {
            out.extend(served(&group, &version, list));
        }
    }
    out.sort_by(|a, b| (&a.ar.group, &a.ar.plural).cmp(&(&b.ar.group, &b.ar.plural)));
    Ok(out)
}

fn served(group: &str, version: &str, list: APIResourceList) -> Vec<Served> {
    let api_version = match group {
        "" => version.to_string(),
        g => format!("{g}/{version}"),
    };
    list.resources
        .into_iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| Served {
            ar: ApiResource {
                group: group.to_string(),
                version: version.to_string(),
                api_version: api_version.clone(),
                kind: r.kind,
                plural: r.name,
            },
            namespaced: r.namespaced,
            singular: r.singular_name,
            short_names: r.short_names.unwrap_or_default(),
            verbs: r.verbs,
        })
        .collect()
}

/// Every object `selector` selects among the namespaced kinds the cluster lists, in `ns` (or
/// every namespace), with its kind. A kind the caller may not list is passed over.
pub(super) async fn labelled<'a>(
    client: &kube::Client,
    served: &'a [Served],
    ns: Option<&str>,
    selector: &str,
) -> Vec<(&'a Served, kube::api::DynamicObject)> {
    use kube::api::{Api, DynamicObject, ListParams};
    let lp = ListParams::default().labels(selector);
    let lists = futures::stream::iter(served.iter().filter(|k| k.namespaced && k.lists()))
        .map(|k| {
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &k.ar),
                None => Api::all_with(client.clone(), &k.ar),
            };
            let lp = lp.clone();
            async move { (k, api.list(&lp).await) }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    lists
        .into_iter()
        .flat_map(|(k, list)| {
            let items = list.map(|l| l.items).unwrap_or_default();
            items.into_iter().map(move |o| (k, o))
        })
        .collect()
}

/// The one kind `wanted` names among `kinds`; an error that says what to type when none
/// or several do.
pub(super) fn find<'a>(kinds: &'a [Served], wanted: &str) -> anyhow::Result<&'a Served> {
    let lower = wanted.to_lowercase();
    let (name, suffix) = match lower.split_once('.') {
        Some((n, s)) => (n, Some(s)),
        None => (lower.as_str(), None),
    };
    let hits: Vec<&Served> = kinds
        .iter()
        .filter(|k| k.named(name) && suffix.is_none_or(|s| k.in_group(s)))
        .collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => anyhow::bail!(
            "the cluster serves no kind named {wanted:?} (`kubectl api-resources` lists the names it takes)"
        ),
        several => {
            // The built-in kind wins over a namesake, as in kubectl (`events`).
            let builtin: Vec<&&Served> = several
                .iter()
                .filter(|k| k.ar.group.is_empty() || !k.ar.group.contains('.'))
                .collect();
            if let [one] = builtin.as_slice() {
                return Ok(one);
            }
            let names: Vec<String> = several
                .iter()
                .map(|k| format!("{}.{}", k.ar.plural, k.ar.group))
                .collect();
            anyhow::bail!(
                "{wanted:?} names several kinds: {}; say which (`{}/NAME`)",
                names.join(", "),
                names[0]
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, version: &str, kind: &str, plural: &str, short: &[&str]) -> Served {
        Served {
            ar: ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: format!("{group}/{version}"),
                kind: kind.into(),
                plural: plural.into(),
            },
            namespaced: true,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            singular: kind.to_lowercase(),
            verbs: vec!["list".into()],
        }
    }

    #[test]
    fn a_kind_is_found_by_every_name_kubectl_takes() {
        let kinds = [
            kind(
                "sre.example.com",
                "v1alpha1",
                "WebSite",
                "websites",
                &["ws"],
            ),
            kind("apps", "v1", "Deployment", "deployments", &["deploy"]),
            kind(
                "static.example.com",
                "v1",
                "StaticSite",
                "staticsites",
                &["ss"],
            ),
            kind("", "v1", "Event", "events", &["ev"]),
            kind("events.k8s.io", "v1", "Event", "events", &[]),
        ];
        for name in [
            "website",
            "websites",
            "WebSite",
            "ws",
            "WebSite.sre.example.com",
            "websites.v1alpha1.sre.example.com",
        ] {
            assert_eq!(find(&kinds, name).unwrap().ar.kind, "WebSite", "{name}");
        }
        assert_eq!(find(&kinds, "ss").unwrap().ar.plural, "staticsites");
        assert_eq!(find(&kinds, "deploy").unwrap().ar.group, "apps");
        assert_eq!(find(&kinds, "events").unwrap().ar.group, "");
        assert_eq!(
            find(&kinds, "events.events.k8s.io").unwrap().ar.group,
            "events.k8s.io"
        );
        let e = find(&kinds, "websites.other.dev").unwrap_err().to_string();
        assert!(e.contains("api-resources"), "{e}");
        let two = [
            kind("a.example.com", "v1", "Site", "sites", &[]),
            kind("b.example.com", "v1", "Site", "sites", &[]),
        ];
        let e = find(&two, "site").unwrap_err().to_string();
        assert!(
            e.contains("sites.a.example.com, sites.b.example.com"),
            "{e}"
        );
    }
}
