//! [`HostReport`]: what a dialect found out about its host, for `/readyz`, the metrics and
//! the log. Each status is an enum; `as_str` gives the word `/readyz` and the metrics show.

use serde::{Serialize, Serializer};

/// What a dialect found out about its host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostReport {
    /// Whether a probe has concluded, and how.
    pub probe: Probe,
    /// The read strategy chosen, once ready.
    pub strategy: Option<Strategy>,
    /// Why the host is refused: what it lacks.
    pub refused: Option<String>,
    /// The most `top_logprobs` entries the host returns.
    pub top_logprobs: Option<usize>,
    /// How token ids come back.
    pub token_ids: Option<TokenIds>,
    /// What `logit_bias` does.
    pub logit_bias: Option<LogitBias>,
    /// What continues the `answer=` prefill.
    pub prefill: Option<Prefill>,
}

impl HostReport {
    /// Whether reads may go out.
    pub fn ready(&self) -> bool {
        self.probe == Probe::Ready
    }
}

/// Defines a status enum whose variants serialize as their `as_str` words.
macro_rules! status {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $word:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// The word `/readyz`, the metrics and the log show.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

status! {
    /// Where the host's probe stands.
    Probe {
        /// No probe has concluded yet.
        Unprobed => "unprobed",
        /// The host can be read (or, for a native upstream, serves the model).
        Ready => "ready",
        /// The host cannot be served: [`HostReport::refused`] says what it lacks.
        Refused => "refused",
    }
}

status! {
    /// How an `openai` host is read.
    Strategy {
        /// Every option of a read biased by the same amount: the returned logprobs,
        /// renormalised, are the masked distribution.
        PostBias => "post_bias",
        /// The raw top-K read, renormalised over the options.
        RawTopK => "raw_top_k",
    }
}

status! {
    /// How the host names the tokens of its logprob entries.
    TokenIds {
        /// An `id` field (llama.cpp) or a `token_id` field.
        Field => "id",
        /// Tokens written `token_id:N`.
        Strings => "token_id:N",
        /// Only the text: options are found by the token table's label text.
        Text => "text",
    }
}

status! {
    /// What `logit_bias` does on the host.
    LogitBias {
        /// Honoured, and the returned logprobs include it.
        AfterLogprobs => "after_logprobs",
        /// Honoured, but the returned logprobs are raw.
        BeforeLogprobs => "before_logprobs",
        /// Not honoured (or refused).
        Ignored => "ignored",
    }
}

status! {
    /// Which request field makes the host continue the `answer=` prefill.
    Prefill {
        /// A trailing assistant message is continued as it is.
        TrailingMessage => "trailing_message",
        /// `continue_final_message: true` with `add_generation_prompt: false`.
        ContinueFinalMessage => "continue_final_message",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_serializes_each_status_as_its_word() {
        let report = HostReport {
            probe: Probe::Ready,
            strategy: Some(Strategy::PostBias),
            refused: None,
            top_logprobs: Some(20),
            token_ids: Some(TokenIds::Strings),
            logit_bias: Some(LogitBias::AfterLogprobs),
            prefill: Some(Prefill::ContinueFinalMessage),
        };
        assert_eq!(
            serde_json::to_string(&report).expect("serializes"),
            r#"{"probe":"ready","strategy":"post_bias","refused":null,"top_logprobs":20,"token_ids":"token_id:N","logit_bias":"after_logprobs","prefill":"continue_final_message"}"#
        );
    }
}
