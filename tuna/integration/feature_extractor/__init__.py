"""The MetaSchedule feature-extractor extension point: :class:`FeatureExtractor` (tuna's
analysis terms as features for a learned cost model such as ``XGBModel``)."""

from .tuna_features import FeatureExtractor, feature_names, feature_row

__all__ = ["FeatureExtractor", "feature_names", "feature_row"]
