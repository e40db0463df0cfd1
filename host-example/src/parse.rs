//! The parse role: a small role that shows composition. It contributes one verb
//! (`parse-text`) to the shared catalog and one stored workflow (`tokenize-text`,
//! calling the Tokenizer at `[parse].tokenizer_target`) to the registry's repository.

use registry_stub::registry::surface_message;
use registry_stub::{Action, ActionRequest, MountContext, MountError, Role};
use serde::{Deserialize, Serialize};
use serde_json::json;
use workflow::testkit::{step, workflow};

const PARSE_PROTO: &str = include_str!("../proto/parse.proto");

/// The `[parse]` section.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ParseConfig {
    /// `host:port` of the Tokenizer service the `tokenize-text` workflow calls.
    pub tokenizer_target: String,
}

impl Default for ParseConfig {
    fn default() -> Self {
        ParseConfig {
            tokenizer_target: "127.0.0.1:50051".into(),
        }
    }
}

/// The parse role.
pub struct ParseRole {
    pub config: ParseConfig,
}

#[async_trait::async_trait]
impl Role for ParseRole {
    fn name(&self) -> &str {
        "parse"
    }

    fn requires(&self) -> Vec<String> {
        vec!["registry".into()]
    }

    async fn mount(&self, ctx: &mut MountContext) -> Result<(), MountError> {
        let pool =
            workflow::schema::compile_proto_pool("protomolt/parse/v1/parse.proto", PARSE_PROTO)
                .map_err(MountError)?;
        ctx.add_action(Action::new(
            "parse-text",
            "Split a text into words (whitespace-separated).",
            "parse:run",
            surface_message(&pool, "protomolt.parse.v1.ParseTextRequest")?,
            surface_message(&pool, "protomolt.parse.v1.ParseTextResponse")?,
            |request: ActionRequest| async move {
                let words: Vec<&str> = request.str("text").split_whitespace().collect();
                Ok(json!({ "words": words, "count": words.len() }))
            },
        ));
        ctx.contribute_workflow(workflow(
            "tokenize-text",
            vec![step(
                "tokenize",
                &self.config.tokenizer_target,
                "jobs.test.Tokenizer/Tokenize",
                &["text = input.text"],
            )],
            None,
        ))?;
        Ok(())
    }
}
