/** The replica models (`MODEL_DIR`, default ../shared/models) the tests serve, by the part each plays. */

/** The small, fast classifier most tests serve. */
export const CLASSIFIER = 'replica/tiny-bert-sst2';
/** A classifier several times slower than CLASSIFIER, for tests that need a model call to take a while. */
export const SLOW_CLASSIFIER = 'replica/distilbert-base-uncased-finetuned-sst-2-english';
/** The classifier `npm start` and the bench serve by default. */
export const DEFAULT_CLASSIFIER = 'replica/MiniLM-L6-H384-uncased-sst2';
export const NER = 'replica/tiny-bert-ner';
export const FILL_MASK = 'replica/MiniLM-L6-H384-uncased-fill-mask';
export const EMBEDDER = 'replica/all-MiniLM-L6-v2';
export const QA = 'replica/tiny-bert-squad';
export const NLI = 'replica/tiny-bert-mnli';
export const RERANKER = 'replica/ms-marco-MiniLM-L-6-v2';
