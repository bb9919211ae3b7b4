"""DVC stage nlvr_analysis: the generated link-probability matrices of the conditional NAC on
every validation sentence -> PCA -> t-SNE, reasoning-type structure measures, example graphs
(Figure 6). Writes metrics/nlvr/analysis.json, embedding.csv and examples.json."""
from nac.tracks.nlvr import run_analysis
from nac.tracks.params import load_all_params


def main() -> None:
    run_analysis(load_all_params())


if __name__ == "__main__":
    main()
