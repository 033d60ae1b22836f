# Offline datasets for the demo and tests (real datasets come through the preparation stage).
IMAGES = config.get("data", {}).get("images", {})
TEXT = config.get("data", {}).get("text", {})


rule gen_images:
    output:
        directory(os.path.join(config["storage"]["shared"], IMAGES.get("name", "images"))),
    log:
        f"{RES}/logs/gen_images.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        classes=IMAGES.get("classes", 10),
        train=IMAGES.get("train_per_class", 32),
        val=IMAGES.get("val_per_class", 8),
        size=IMAGES.get("size", 96),
    resources:
        **CPU_STEP,
    shell:
        "wattlife gen-images {output:q} --classes {params.classes} --train-per-class {params.train}"
        " --val-per-class {params.val} --size {params.size} > {log:q} 2>&1"


rule gen_text:
    output:
        directory(os.path.join(config["storage"]["shared"], TEXT.get("name", "text"))),
    log:
        f"{RES}/logs/gen_text.log",
    conda:
        "../envs/wattlife.yaml"
    params:
        words=TEXT.get("words", 200000),
    resources:
        **CPU_STEP,
    shell:
        "wattlife gen-text {output:q} --words {params.words} > {log:q} 2>&1"
