//! The two read strategies the probe may choose: post-bias logprobs (with the anchor
//! merge past the host's cap) and the raw top-K (the module doc of `openai/mod.rs` says
//! when each is exact).

use std::sync::Arc;

use serde::Serialize;

use super::{CompatBackend, Host};
use crate::backend::chat::{BiasMap, ChatResponse, TopLogprob};
use crate::backend::host_report::{LogitBias, Prefill, TokenIds};
use crate::backend::{BackendError, Messages, ReadReply, ReadRequest, ReadUsage};
use crate::in_flight::InFlightPermit;

/// The request body of one read.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    continue_final_message: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    add_generation_prompt: Option<bool>,
    max_tokens: u32,
    temperature: f64,
    top_p: f64,
    seed: u32,
    logprobs: bool,
    top_logprobs: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    logit_bias: Option<BiasMap<'a>>,
}

impl CompatBackend {
    /// One read, with the host's strategy.
    pub(super) async fn send(
        &self,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let host = self.host()?;
        if host.bias == LogitBias::AfterLogprobs && !request.chained {
            self.read_post_bias(host, request, slot).await
        } else {
            self.read_raw(host, request, slot).await
        }
    }

    /// The request body: the prefill field the probe found, and a bias on `biased`.
    fn body<'a>(
        &'a self,
        host: Host,
        request: &ReadRequest<'a>,
        top_logprobs: usize,
        biased: Option<&'a [u32]>,
    ) -> ChatRequest<'a> {
        let continued = (host.prefill == Prefill::ContinueFinalMessage).then_some(true);
        ChatRequest {
            model: &self.upstream_model,
            messages: Messages::new(request),
            continue_final_message: continued,
            add_generation_prompt: continued.map(|_| false),
            max_tokens: 1,
            temperature: 1.0,
            top_p: 1.0,
            seed: 0,
            logprobs: true,
            top_logprobs,
            logit_bias: biased.map(BiasMap),
        }
    }

    /// Strategy 2: the raw top-K, no bias; every option must be in it.
    async fn read_raw(
        &self,
        host: Host,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let bytes = self
            .post(
                &self.body(host, &request, host.cap, None),
                request.routing,
                slot,
            )
            .await?;
        let (found, usage, model) = self.find(&bytes, host, request.read_ids)?;
        Ok(ReadReply {
            logprobs: all_found(found, host.cap)?,
            usage,
            model,
            pre_mask: true,
            http_requests: 1,
        })
    }

    /// Strategy 1 and 3: the group (the read's ids and the anchor) biased alike; each
    /// option's log-ratio to the anchor, the same in every group of the prompt.
    async fn read_post_bias(
        &self,
        host: Host,
        request: ReadRequest<'_>,
        slot: &Arc<InFlightPermit>,
    ) -> Result<ReadReply, BackendError> {
        let anchor = *request
            .allowed_ids
            .first()
            .ok_or_else(|| BackendError::Protocol("a read without options".into()))?;
        let mut group = Vec::with_capacity(request.read_ids.len() + 1);
        if !request.read_ids.contains(&anchor) {
            group.push(anchor);
        }
        group.extend_from_slice(request.read_ids);
        if group.len() > host.cap {
            return Err(BackendError::Protocol(format!(
                "a group of {} ids is more than the host's top-{} cap",
                group.len(),
                host.cap
            )));
        }
        let body = self.body(host, &request, group.len(), Some(&group));
        let bytes = self.post(&body, request.routing, slot).await?;
        let (found, usage, model) = self.find(&bytes, host, &group)?;
        let group_lps = all_found(found, host.cap)?;
        let anchor_lp = group_lps[group.iter().position(|g| *g == anchor).unwrap_or(0)];
        let offset = group.len() - request.read_ids.len();
        Ok(ReadReply {
            logprobs: group_lps[offset..]
                .iter()
                .map(|lp| lp - anchor_lp)
                .collect(),
            usage,
            model,
            pre_mask: false,
            http_requests: 1,
        })
    }

    /// The logprob of each of `wanted` in an answer (`None` where absent), its usage and
    /// model.
    #[allow(clippy::type_complexity)]
    fn find(
        &self,
        bytes: &[u8],
        host: Host,
        wanted: &[u32],
    ) -> Result<(Vec<Option<f64>>, Option<ReadUsage>, Option<String>), BackendError> {
        let mut response = ChatResponse::parse(bytes)?;
        let usage = response.read_usage()?;
        let model = response.model.take();
        let top = response
            .into_first_position()
            .and_then(|p| p.top_logprobs)
            .ok_or_else(|| BackendError::Protocol("no logprobs in the answer".into()))?;
        let texts = match host.ids {
            TokenIds::Text => Some(self.texts_of(wanted)?),
            TokenIds::Field | TokenIds::Strings => None,
        };
        let mut found = vec![None; wanted.len()];
        for entry in &top {
            let Some(pos) = position_of(entry, host.ids, wanted, texts.as_deref()) else {
                continue;
            };
            let lp = entry.logprob.unwrap_or(f64::NAN);
            if !lp.is_finite() {
                return Err(BackendError::Protocol(format!(
                    "non-finite logprob for option {pos} of the read"
                )));
            }
            if found[pos].replace(lp).is_some() {
                return Err(BackendError::Protocol(format!(
                    "option {pos} of the read appears twice in the answer"
                )));
            }
        }
        Ok((found, usage, model))
    }

    /// The label text of each of `ids`, for a host that names tokens by text only.
    fn texts_of<'t>(&'t self, ids: &[u32]) -> Result<Vec<&'t str>, BackendError> {
        ids.iter()
            .map(|id| {
                self.labels
                    .by_id
                    .get(id)
                    .map(String::as_str)
                    .ok_or_else(|| {
                        BackendError::Protocol(format!(
                            "the host names tokens by text only and id {id} has no label text"
                        ))
                    })
            })
            .collect()
    }
}

/// Which of `wanted` an entry is, by the host's way of naming tokens (`texts`: the label
/// texts of `wanted`, for a text-only host).
fn position_of(
    entry: &TopLogprob<'_>,
    ids: TokenIds,
    wanted: &[u32],
    texts: Option<&[&str]>,
) -> Option<usize> {
    let by_id = |id: Option<u64>| id.and_then(|id| wanted.iter().position(|w| u64::from(*w) == id));
    match ids {
        TokenIds::Field => by_id(entry.id.or(entry.token_id)),
        TokenIds::Strings => by_id(entry.id_in_token()),
        TokenIds::Text => {
            let text = entry.token.as_deref()?;
            texts?.iter().position(|t| *t == text)
        }
    }
}

/// Every option's logprob, or how many are missing from the top-K.
fn all_found(found: Vec<Option<f64>>, top_k: usize) -> Result<Vec<f64>, BackendError> {
    let options = found.len();
    let missing = found.iter().filter(|f| f.is_none()).count();
    if missing > 0 {
        return Err(BackendError::Missing {
            missing,
            options,
            top_k,
        });
    }
    Ok(found.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_options_are_counted_never_zero() {
        let err = all_found(vec![Some(-1.0), None, None], 20).expect_err("missing");
        assert_eq!(
            err,
            BackendError::Missing {
                missing: 2,
                options: 3,
                top_k: 20
            }
        );
        assert_eq!(all_found(vec![Some(-1.0)], 20), Ok(vec![-1.0]));
    }
}
