"""DVC stage nlvr_analysis: the generated link-probability matrices of the conditional NAC on
every validation sentence -> PCA -> t-SNE, reasoning-type structure measures, example graphs
(Figure 6). Writes metrics/nlvr/analysis.json, embedding.csv and examples.json."""
from nac.pipeline.params import load_params
from nac.tracks.common import validator
from nac.tracks.nlvr import run_analysis


def main() -> None:
    run_analysis(load_params(check=[validator("nlvr")]))


if __name__ == "__main__":
    main()
