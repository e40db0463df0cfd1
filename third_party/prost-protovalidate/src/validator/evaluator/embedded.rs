use std::sync::Weak;

use prost_reflect::DynamicMessage;

use crate::config::ValidationConfig;
use crate::error::Error;

use super::message::MessageEval;
use super::{Evaluator, MessageEvaluator};

/// Evaluator for an embedded (nested) message field.
/// Delegates validation to the nested message's evaluator.
///
/// PATCHED (ProtoMolt, see PATCHES.md at the crate root): the nested evaluator is held
/// weakly. The builder's cache owns every `MessageEval` for as long as the
/// `Validator` lives; a strong reference here made a recursive message type an
/// `Arc` cycle that outlived the `Validator`, leaking its evaluators and, through
/// their descriptors, the whole descriptor pool.
pub(crate) struct EmbeddedMessageEval {
    /// The evaluator for the nested message type, owned by the builder's cache.
    pub message: Weak<MessageEval>,
}

impl Evaluator for EmbeddedMessageEval {
    fn tautology(&self) -> bool {
        self.message
            .upgrade()
            .is_some_and(|message| message.tautology())
    }

    fn evaluate(
        &self,
        _msg: &DynamicMessage,
        val: &prost_reflect::Value,
        cfg: &ValidationConfig,
    ) -> Result<(), Error> {
        let Some(nested_msg) = val.as_message() else {
            return Ok(());
        };

        // The cache outlives every evaluation (both belong to the `Validator` being
        // used), so the upgrade succeeds; were it ever to fail, nothing is checked,
        // as for an uninitialized placeholder.
        match self.message.upgrade() {
            Some(message) => message.evaluate_message(nested_msg, cfg),
            None => Ok(()),
        }
    }
}
