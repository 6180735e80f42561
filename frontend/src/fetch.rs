//! Loading the API's answers into signals: each query's latest answer
//! wins, answers to superseded queries are dropped.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::load::Load;

/// Fetches `url` whenever `query` changes and keeps the latest answer
/// (answers to superseded queries are dropped).
pub fn fetch_into<T, Q>(
    query: Memo<Option<Q>>,
    target: RwSignal<Load<T>>,
    url: impl Fn(&Q) -> String + Send + Sync + 'static,
    parse: impl Fn(Vec<u8>) -> Result<T, String> + Copy + Send + Sync + 'static,
) where
    T: Send + Sync + 'static,
    Q: Clone + PartialEq + Send + Sync + 'static,
{
    load_into(query, target, move |q| {
        let url = url(q);
        async move { api::get_bytes(&url).await.and_then(parse) }
    });
}

/// Runs `load` whenever `query` changes and keeps the latest answer
/// (answers to superseded queries are dropped).
pub fn load_into<T, Q, F>(
    query: Memo<Option<Q>>,
    target: RwSignal<Load<T>>,
    load: impl Fn(&Q) -> F + Send + Sync + 'static,
) where
    T: Send + Sync + 'static,
    Q: Clone + PartialEq + Send + Sync + 'static,
    F: Future<Output = Result<T, String>> + 'static,
{
    Effect::new(move |_| {
        let Some(q) = query.get() else {
            return;
        };
        target.set(Load::Loading);
        let loading = load(&q);
        spawn_local(async move {
            let result = loading.await;
            if query.get_untracked().as_ref() == Some(&q) {
                target.set(match result {
                    Ok(value) => Load::Ready(value),
                    Err(message) => Load::Failed(message),
                });
            }
        });
    });
}
