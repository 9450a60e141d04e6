"""Settings of the compliance stage: `[compliance]` and its sub-tables.

Only what a person has to decide or declare lives here (who the provider is, release dates, licence, uses,
power assumptions...). Everything the pipeline did is read from the stages' manifests instead, so the two
cannot drift apart. Every declaration is optional: one left out is never filled with a guess, it becomes an
entry of `open_items.md` (and, with `strict = true`, a failure of the stage).

Lists follow one rule: left out (None) means "not declared yet" (an open item); an empty list `[]` is a
declaration that there is nothing to list (e.g. `dependencies = []` for a model trained from scratch).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field, field_validator

from pipeline.config import StrictModel


def _iso_date(v: Any) -> Any:
    """TOML dates (`2026-01-31`) arrive as datetime.date; keep the ISO string so run.toml stays simple."""
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        try:
            dt.date.fromisoformat(v)
        except ValueError:
            raise ValueError("must be a date like 2026-01-31") from None
    return v


class ProviderConfig(StrictModel):
    """Public Summary 1.1, Model Documentation Form: general information."""

    name: str | None = Field(None, description="Legal name of the provider.")
    contact: str | None = Field(None, description="Contact (address, e-mail or web form) for the AI Office and the public.")
    established_in_eu: bool | None = Field(None, description="Whether the provider is established in the Union.")
    authorised_representative: str | None = Field(
        None, description="Name and contact of the authorised representative (Art. 54); needed when not established in the EU.")
    sme: bool | None = Field(None, description="SME or start-up (Public Summary 2.3: top 5% / 1,000 domains instead of top 10%).")
    code_of_practice_signatory: bool | None = Field(None, description="Signatory of the GPAI Code of Practice (Public Summary 3.1).")


class ModelConfig(StrictModel):
    """What the provider says about the released model (Annex XI 1.1, Annex XII 1, the Model Documentation Form)."""

    name: str | None = Field(None, description="Model name as released.")
    version: str | None = Field(None, description="Model version.")
    dependencies: list[str] | None = Field(
        None, description="Models this one modifies or fine-tunes (with a link to their summary); [] when trained from scratch.")
    base_model_training_flops: float | None = Field(
        None, gt=0, description="Training compute of the base model this run modifies (FLOP), as its provider states it: "
        "a modification is a new model only above one third of it (the Commission's GPAI guidelines). Needed only "
        "when dependencies is not empty.")
    released: bool | None = Field(
        None, description="Whether the model has been released (first made available through any channel); false: the "
        "release and market dates are not asked for and the documents say \"not released\".")
    release_date: str | None = Field(None, description="Date first released through any channel (YYYY-MM-DD).")
    eu_market_date: str | None = Field(None, description="Date placed on the Union market (YYYY-MM-DD).")
    licence: str | None = Field(None, description="Licence of the model (SPDX id or name, with a link).")
    licence_category: str | None = Field(
        None, description="Category of the licence for the Model Documentation Form (e.g. free and open-source, "
        "open weights with restrictions, proprietary).")
    distribution_channels: list[str] | None = Field(None, description="How the model is distributed (weights download, API, ...).")
    downstream_channels: list[str] | None = Field(
        None, description="The channels through which downstream providers get the model (the form's item for them).")
    acceptable_use_policy: str | None = Field(None, description="Link to the acceptable use policy, or a statement that none exists.")
    intended_uses: list[str] | None = Field(None, description="Tasks the model is intended to perform.")
    restricted_uses: list[str] | None = Field(None, description="Uses restricted or prohibited by the provider; [] when none.")
    release_export: Literal["bf16", "fp32"] | None = Field(
        None, description="The distributed form: the Hugging Face export of the final checkpoint in this dtype. The "
        "compliance stage reuses export/step-<N>-<dtype>/ (`europa export hf`) or writes it there, and the documents' "
        "authenticity digests are its files'. Unset: they are the training checkpoint's and the tokenizer's.")
    known_limitations: str | None = Field(
        None, description="Limitations downstream providers must know beyond what the evaluation figures show (Annex XII, "
        "Art. 53(1)(b)(i)): e.g. languages or domains it was not trained or evaluated on, no safety tuning.")
    ai_system_types: list[str] | None = Field(None, description="Types and nature of AI systems it can be integrated into.")
    integration_means: str | None = Field(
        None, description="Technical means to integrate it: instructions for use, infrastructure, tools (Annex XI 2(a), XII 2(a)).")
    required_hardware: str | None = Field(None, description="Hardware needed to run the model (Model Documentation Form).")
    external_interaction: str | None = Field(
        None, description="How the model interacts with hardware or software that is not part of it (Annex XII 1(d)).")
    design_rationale: str | None = Field(
        None, description="Key design choices with rationale and assumptions; what the model is optimised for (Annex XI 2(b)).")
    training_rationale: str | None = Field(
        None, description="Why the key training decisions were made (the form's decision rationale for the training process).")
    training_continues: bool | None = Field(None, description="Whether the model continues to be trained on new data after release.")

    @field_validator("release_date", "eu_market_date", mode="before")
    @classmethod
    def _dates(cls, v: Any) -> Any:
        return _iso_date(v)


class DataConfig(StrictModel):
    """What the records cannot say about the training content."""

    source_descriptions: dict[str, str] | None = Field(
        None, description="Ingest source name -> a sentence on its content (Public Summary section 2); every source needs one.")
    illegal_content_measures: list[str] | None = Field(
        None, description="Measures against illegal content beyond what ingest records (its block lists), e.g. a "
        "supplier's filtering; [] for none.")
    other_characteristics: str | None = Field(
        None, description="Public Summary 1.3: national, regional or demographic specificities of the training data.")
    user_data_from_model_interactions: bool | None = Field(
        None, description="Public Summary 2.4: whether data from users' interactions with the model is used (needed when a "
        "source has category user_data).")
    user_data_from_other_services: bool | None = Field(
        None, description="Public Summary 2.4: whether data collected from the provider's other services or products is "
        "used (needed when a source has category user_data).")
    user_data_services: str | None = Field(None, description="Public Summary 2.4: which services or products the user data comes from.")
    synthetic_gpai_models: list[str] | None = Field(
        None, description="Public Summary 2.5: general-purpose AI models that generated synthetic training data, each with a "
        "link to its public summary (needed when a source has category synthetic).")
    synthetic_other_models: list[str] | None = Field(
        None, description="Public Summary 2.5: other AI models that generated synthetic training data; [] for none.")


class CrawlerConfig(StrictModel):
    """Public Summary 2.3 and Copyright policy 1.3: only needed when a source has category "crawled"."""

    name: str | None = Field(None, description="Crawler name.")
    user_agent: str | None = Field(None, description="User-agent string it identifies with.")
    purposes: str | None = Field(None, description="What the crawler collects data for.")
    robots_txt: str | None = Field(None, description="How robots.txt (RFC 9309) and other machine-readable opt-outs are honoured.")
    paywalls_and_logins: str | None = Field(None, description="Behaviour towards paywalls and log-ins (no circumvention).")
    captchas: str | None = Field(None, description="Behaviour towards captchas.")
    collection_period: str | None = Field(None, description="When the crawler collected the data (e.g. 2025-01 to 2025-06).")
    content_description: str | None = Field(None, description="Public Summary 2.3: what content and which kinds of sources were crawled.")
    info_url: str | None = Field(None, description="Public page describing the crawler and its robots.txt handling.")


class CopyrightConfig(StrictModel):
    """Code of Practice, Copyright chapter: the parts of the policy only a person can state."""

    policy_url: str | None = Field(None, description="Where the copyright policy is published (Measure 1.1).")
    lawful_access: str | None = Field(
        None, description="How only lawfully accessible content is used; no circumvention of paywalls (Measure 1.2).")
    infringing_sites: str | None = Field(
        None, description="Which list of persistently infringing sites is excluded, or why none applies (Measure 1.2).")
    output_safeguards: str | None = Field(None, description="Safeguards against infringing outputs (Measure 1.4).")
    complaint_contact: str | None = Field(None, description="Contact point and complaint mechanism for rightsholders (Measure 1.5).")


class EnergyConfig(StrictModel):
    """Power assumptions behind the energy estimate: energy = device-hours x watts per device x PUE."""

    watts_per_device: float | None = Field(None, gt=0, description="Average electrical power of one device while training (W).")
    pue: float | None = Field(None, ge=1.0, description="Power usage effectiveness of the data centre (>= 1).")
    basis: str | None = Field(None, description="Where these figures come from (e.g. the device's TDP, the site's published PUE).")
    not_available: str | None = Field(
        None, description="Why the energy cannot be stated: the form then reads N/A (allowed only when the compute provider "
        "does not disclose what is needed); leave the power figures out.")


class InferenceConfig(StrictModel):
    """The benchmarked task behind the form's inference-compute figure."""

    task: str | None = Field(None, description="Name of the benchmarked task.")
    tokens: int | None = Field(None, ge=1, description="Tokens processed for the task (prompt + generated).")
    hardware: str | None = Field(None, description="The hardware the task's inference compute refers to (the form names it).")


class SystemicRiskConfig(StrictModel):
    """Annex XI section 2 and the Art. 52(1) notification: asked for only when training compute or the configured
    run's projection crosses the systemic-risk presumption, or is within the 30% accuracy margin below it."""

    notification: str | None = Field(
        None, description="Whether and when the Commission was notified under Art. 52(1) (e.g. \"notified 2027-01-15, "
        "reference ...\"), or the provider's reasons why the threshold will not be met.")

    evaluation_strategy: str | None = Field(None, description="Evaluation strategies, criteria and methodologies (Annex XI 2.1).")
    adversarial_testing: str | None = Field(None, description="Adversarial testing (red-teaming) measures and results (Annex XI 2.2).")
    model_adaptations: str | None = Field(None, description="Alignment and fine-tuning measures (Annex XI 2.2).")
    system_architecture: str | None = Field(None, description="How the software components build or feed into each other (Annex XI 2.3).")


class ComplianceConfig(StrictModel):
    strict: bool = Field(False, description="Fail the stage while any item is open (nothing provides it) or any declaration "
                         "contradicts a record (open_items.md lists both).")
    summary_version: str | None = Field(None, description="Version of the public summary of training content (its header).")
    previous_versions: list[str] | None = Field(
        None, description="Links to earlier versions of the public summary (its header); [] for the first version.")
    documentation_version: str | None = Field(
        None, description="Version of the technical documentation and the Model Documentation Form (their header).")
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    crawler: CrawlerConfig = Field(default_factory=CrawlerConfig)
    copyright: CopyrightConfig = Field(default_factory=CopyrightConfig)
    energy: EnergyConfig = Field(default_factory=EnergyConfig)
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    systemic_risk: SystemicRiskConfig = Field(default_factory=SystemicRiskConfig)
