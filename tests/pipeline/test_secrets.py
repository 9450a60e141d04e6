from pipeline.secrets import redact, redact_text


def test_credentials_in_urls_and_tokens_are_masked(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz123456")
    text = ("fetch https://alice:s3cret@data.example.org/x.parquet?token=abc123&lang=de "
            "then hf_abcdefghijklmnopqrstuvwxyz123456 again")
    out = redact_text(text)
    assert "s3cret" not in out and "alice" not in out and "abc123" not in out and "hf_abc" not in out
    assert "https://***@data.example.org/x.parquet?token=***&lang=de" in out


def test_secret_keys_masked_but_env_names_kept():
    data = {"token_env": "HF_TOKEN", "password": "hunter2", "nested": [{"api_key": "k", "url": "s3://u:p@b/k"}]}
    assert redact(data) == {"token_env": "HF_TOKEN", "password": "***", "nested": [{"api_key": "***", "url": "s3://***@b/k"}]}


def test_numbers_under_token_like_keys_are_measurements_not_secrets():
    from pipeline.secrets import redact

    out = redact({"flops_per_token": 2_495_232, "hf_token": "hf_abcdefghijklmnopqrstuvwxyz", "bos_token": None})
    assert out == {"flops_per_token": 2_495_232, "hf_token": "***", "bos_token": None}
