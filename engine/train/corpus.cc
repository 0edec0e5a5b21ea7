#include "engine/train/corpus.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpeserve::train {
namespace {

enum Gender { kMasculine, kFeminine, kNeuter };
// What a noun is, so that sentences make sense: who can act, what can be bought or read.
enum Kind { kPerson = 1, kAnimal = 2, kThing = 4, kPlace = 8, kText = 16 };
enum Case { kNominative, kAccusative, kDative };

struct Noun {
  const char* en;
  const char* en_plural;
  const char* de;
  const char* de_plural;
  Gender gender;
  int kind;
};

constexpr Noun kNouns[] = {
    {"dog", "dogs", "Hund", "Hunde", kMasculine, kAnimal},
    {"man", "men", "Mann", "Männer", kMasculine, kPerson},
    {"teacher", "teachers", "Lehrer", "Lehrer", kMasculine, kPerson},
    {"friend", "friends", "Freund", "Freunde", kMasculine, kPerson},
    {"father", "fathers", "Vater", "Väter", kMasculine, kPerson},
    {"garden", "gardens", "Garten", "Gärten", kMasculine, kPlace},
    {"tree", "trees", "Baum", "Bäume", kMasculine, kThing},
    {"bird", "birds", "Vogel", "Vögel", kMasculine, kAnimal},
    {"letter", "letters", "Brief", "Briefe", kMasculine, kThing | kText},
    {"apple", "apples", "Apfel", "Äpfel", kMasculine, kThing},
    {"doctor", "doctors", "Arzt", "Ärzte", kMasculine, kPerson},
    {"table", "tables", "Tisch", "Tische", kMasculine, kThing},
    {"cat", "cats", "Katze", "Katzen", kFeminine, kAnimal},
    {"woman", "women", "Frau", "Frauen", kFeminine, kPerson},
    {"mother", "mothers", "Mutter", "Mütter", kFeminine, kPerson},
    {"city", "cities", "Stadt", "Städte", kFeminine, kPlace},
    {"bridge", "bridges", "Brücke", "Brücken", kFeminine, kThing},
    {"flower", "flowers", "Blume", "Blumen", kFeminine, kThing},
    {"door", "doors", "Tür", "Türen", kFeminine, kThing},
    {"school", "schools", "Schule", "Schulen", kFeminine, kPlace},
    {"sister", "sisters", "Schwester", "Schwestern", kFeminine, kPerson},
    {"house", "houses", "Haus", "Häuser", kNeuter, kThing | kPlace},
    {"child", "children", "Kind", "Kinder", kNeuter, kPerson},
    {"car", "cars", "Auto", "Autos", kNeuter, kThing},
    {"book", "books", "Buch", "Bücher", kNeuter, kThing | kText},
    {"girl", "girls", "Mädchen", "Mädchen", kNeuter, kPerson},
    {"window", "windows", "Fenster", "Fenster", kNeuter, kThing},
    {"picture", "pictures", "Bild", "Bilder", kNeuter, kThing},
};

struct Adjective {
  const char* en;
  const char* de;
};

constexpr Adjective kAdjectives[] = {{"big", "groß"}, {"small", "klein"},    {"old", "alt"},
                                     {"new", "neu"},  {"red", "rot"},        {"young", "jung"},
                                     {"good", "gut"}, {"beautiful", "schön"}};

struct Verb {
  const char* en;         // base form ("pick up")
  const char* en_third;   // third person singular ("picks up")
  const char* de_first;   // ich ...
  const char* de_third;   // er/sie ...
  const char* de_plural;  // wir/sie ...; also the stem the particle joins at the end
  const char* particle;   // separable prefix, "" for none
  bool transitive;
  int object_kinds;  // what its object may be
};

// Index 0 is "say", used only with a "that" clause.
constexpr Verb kVerbs[] = {
    {"say", "says", "sage", "sagt", "sagen", "", false, 0},
    {"see", "sees", "sehe", "sieht", "sehen", "", true, kPerson | kAnimal | kThing | kPlace},
    {"buy", "buys", "kaufe", "kauft", "kaufen", "", true, kThing},
    {"read", "reads", "lese", "liest", "lesen", "", true, kText},
    {"find", "finds", "finde", "findet", "finden", "", true, kPerson | kAnimal | kThing},
    {"visit", "visits", "besuche", "besucht", "besuchen", "", true, kPerson | kPlace},
    {"love", "loves", "liebe", "liebt", "lieben", "", true, kPerson | kAnimal | kPlace},
    {"call", "calls", "rufe", "ruft", "rufen", "an", true, kPerson},
    {"pick up", "picks up", "hole", "holt", "holen", "ab", true, kPerson | kThing},
    {"invite", "invites", "lade", "lädt", "laden", "ein", true, kPerson},
    {"sleep", "sleeps", "schlafe", "schläft", "schlafen", "", false, 0},
    {"laugh", "laughs", "lache", "lacht", "lachen", "", false, 0},
    {"work", "works", "arbeite", "arbeitet", "arbeiten", "", false, 0},
    {"wait", "waits", "warte", "wartet", "warten", "", false, 0},
    {"sing", "sings", "singe", "singt", "singen", "", false, 0},
    {"play", "plays", "spiele", "spielt", "spielen", "", false, 0},
    {"come back", "comes back", "komme", "kommt", "kommen", "zurück", false, 0},
};

constexpr const char* kNumbersEn[] = {"",      "",      "two",  "three", "four",   "five",  "six",
                                      "seven", "eight", "nine", "ten",   "eleven", "twelve"};
constexpr const char* kNumbersDe[] = {"",       "",     "zwei", "drei", "vier", "fünf", "sechs",
                                      "sieben", "acht", "neun", "zehn", "elf",  "zwölf"};

// Person of a subject: 1 (ich), 3 (er/sie, a singular noun phrase), 6 (wir, sie, plural).
enum Person { kFirst, kThird, kPlural };

Person PersonOf(const Clause& c) {
  if (c.subject)
    return c.subject->plural || c.subject->determiner == Determiner::kNumber ? kPlural : kThird;
  switch (c.pronoun) {
    case Pronoun::kI:
      return kFirst;
    case Pronoun::kHe:
    case Pronoun::kShe:
      return kThird;
    case Pronoun::kWe:
    case Pronoun::kThey:
      return kPlural;
  }
  return kThird;
}

bool IsPlural(const NounPhrase& np) { return np.plural || np.determiner == Determiner::kNumber; }

bool StartsWithVowel(const std::string& word) {
  return !word.empty() && std::string("aeiou").find(word[0]) != std::string::npos;
}

std::string English(const NounPhrase& np) {
  const Noun& noun = kNouns[np.noun];
  std::vector<std::string> words;
  const bool plural = IsPlural(np);
  const std::string adjective = np.adjective ? kAdjectives[*np.adjective].en : "";
  const std::string head = plural ? noun.en_plural : noun.en;
  switch (np.determiner) {
    case Determiner::kThe:
      words.push_back("the");
      break;
    case Determiner::kA:
      words.push_back(StartsWithVowel(adjective.empty() ? head : adjective) ? "an" : "a");
      break;
    case Determiner::kMy:
      words.push_back("my");
      break;
    case Determiner::kHis:
      words.push_back("his");
      break;
    case Determiner::kNumber:
      words.push_back(kNumbersEn[np.number]);
      break;
    case Determiner::kNone:
      break;
  }
  if (!adjective.empty()) words.push_back(adjective);
  words.push_back(head);
  return absl::StrJoin(words, " ");
}

// `negate`: the noun phrase takes "kein" (an indefinite or bare object of a negated verb).
std::string German(const NounPhrase& np, Case c, bool negate) {
  const Noun& noun = kNouns[np.noun];
  const bool plural = IsPlural(np);
  // Column: gender, or 3 for plural.
  const int column = plural ? 3 : static_cast<int>(noun.gender);
  static const char* kDefinite[3][4] = {
      {"der", "die", "das", "die"}, {"den", "die", "das", "die"}, {"dem", "der", "dem", "den"}};
  static const char* kEinEnding[3][4] = {
      {"", "e", "", "e"}, {"en", "e", "", "e"}, {"em", "er", "em", "en"}};
  // Adjective endings after der-words (weak), ein-words (mixed), and with no article (strong,
  // plural only here).
  static const char* kWeak[3][4] = {
      {"e", "e", "e", "en"}, {"en", "e", "e", "en"}, {"en", "en", "en", "en"}};
  static const char* kMixed[3][4] = {
      {"er", "e", "es", "en"}, {"en", "e", "es", "en"}, {"en", "en", "en", "en"}};
  static const char* kStrongPlural[3] = {"e", "e", "en"};
  Determiner determiner = np.determiner;
  std::vector<std::string> words;
  std::string stem;
  if (negate && (determiner == Determiner::kA || determiner == Determiner::kNone)) {
    stem = "kein";
  } else if (determiner == Determiner::kA) {
    stem = "ein";
  } else if (determiner == Determiner::kMy) {
    stem = "mein";
  } else if (determiner == Determiner::kHis) {
    stem = "sein";
  }
  std::string adjective_ending;
  if (!stem.empty()) {
    words.push_back(stem + kEinEnding[c][column]);
    adjective_ending = kMixed[c][column];
  } else if (determiner == Determiner::kThe) {
    words.push_back(kDefinite[c][column]);
    adjective_ending = kWeak[c][column];
  } else {  // a number or no article: plural, strong endings
    if (determiner == Determiner::kNumber) words.push_back(kNumbersDe[np.number]);
    adjective_ending = kStrongPlural[c];
  }
  if (np.adjective) words.push_back(std::string(kAdjectives[*np.adjective].de) + adjective_ending);
  std::string head = plural ? noun.de_plural : noun.de;
  if (plural && c == kDative && head.back() != 'n' && head.back() != 's') head += "n";
  words.push_back(head);
  return absl::StrJoin(words, " ");
}

const char* kPronounsEn[] = {"I", "he", "she", "we", "they"};
const char* kPronounsDe[] = {"ich", "er", "sie", "wir", "sie"};

std::string SubjectEnglish(const Clause& c) {
  return c.subject ? English(*c.subject) : kPronounsEn[static_cast<int>(c.pronoun)];
}
std::string SubjectGerman(const Clause& c) {
  return c.subject ? German(*c.subject, kNominative, false)
                   : kPronounsDe[static_cast<int>(c.pronoun)];
}

// The English clause, as a statement or a question.
std::string ClauseEnglish(const Clause& c, bool question) {
  const Verb& verb = kVerbs[c.verb];
  const bool third = PersonOf(c) == kThird;
  const std::string subject = SubjectEnglish(c);
  std::vector<std::string> words;
  if (question) {
    words = {third ? "does" : "do", subject, verb.en};
  } else if (c.negated) {
    words = {subject, third ? "does not" : "do not", verb.en};
  } else {
    words = {subject, third ? verb.en_third : verb.en};
  }
  if (c.object) words.push_back(English(*c.object));
  if (c.with) words.push_back("with " + English(*c.with));
  return absl::StrJoin(words, " ");
}

// The German clause: main (verb second, or first in a question) or subordinate (verb last,
// separable particle joined to it).
std::string ClauseGerman(const Clause& c, bool question, bool subordinate) {
  const Verb& verb = kVerbs[c.verb];
  const Person person = PersonOf(c);
  const std::string finite = person == kFirst   ? verb.de_first
                             : person == kThird ? verb.de_third
                                                : verb.de_plural;
  const bool kein =
      c.negated && c.object &&
      (c.object->determiner == Determiner::kA || c.object->determiner == Determiner::kNone);
  std::vector<std::string> middle;  // what stands between the verb positions
  if (c.object) middle.push_back(German(*c.object, kAccusative, kein));
  if (c.negated && !kein) middle.push_back("nicht");
  if (c.with) middle.push_back("mit " + German(*c.with, kDative, false));
  std::vector<std::string> words;
  const std::string subject = SubjectGerman(c);
  if (subordinate) {
    words.push_back(subject);
    words.insert(words.end(), middle.begin(), middle.end());
    words.push_back(std::string(verb.particle) + finite);
  } else {
    if (question) {
      words = {finite, subject};
    } else {
      words = {subject, finite};
    }
    words.insert(words.end(), middle.begin(), middle.end());
    if (*verb.particle != '\0') words.push_back(verb.particle);
  }
  return absl::StrJoin(words, " ");
}

std::string Capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

}  // namespace

int NounCount() { return static_cast<int>(std::size(kNouns)); }
int AdjectiveCount() { return static_cast<int>(std::size(kAdjectives)); }
int VerbCount() { return static_cast<int>(std::size(kVerbs)); }
bool IsTransitive(int verb) { return kVerbs[verb].transitive; }
std::string NounEnglish(int noun) { return kNouns[noun].en; }
std::string VerbEnglish(int verb) { return kVerbs[verb].en; }

Translation Render(const Sentence& s) {
  std::string en = ClauseEnglish(s.main, s.question);
  std::string de = ClauseGerman(s.main, s.question, /*subordinate=*/false);
  if (s.connective) {
    const bool because = *s.connective == Connective::kBecause;
    absl::StrAppend(&en, because ? " because " : " that ", ClauseEnglish(s.subordinate, false));
    absl::StrAppend(&de, because ? ", weil " : ", dass ",
                    ClauseGerman(s.subordinate, false, /*subordinate=*/true));
  }
  const char* end = s.question ? "?" : ".";
  return {Capitalized(en) + end, Capitalized(de) + end};
}

namespace {

// A random noun phrase whose noun is of one of `kinds`.
NounPhrase RandomNounPhrase(std::mt19937_64& rng, bool allow_bare, int kinds) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  NounPhrase np;
  do {
    np.noun = pick(NounCount());
  } while ((kNouns[np.noun].kind & kinds) == 0);
  const int d = pick(allow_bare ? 10 : 9);
  np.determiner = d < 4   ? Determiner::kThe
                  : d < 6 ? Determiner::kA
                  : d < 7 ? Determiner::kMy
                  : d < 8 ? Determiner::kHis
                  : d < 9 ? Determiner::kNumber
                          : Determiner::kNone;
  if (np.determiner == Determiner::kNumber) np.number = 2 + pick(11);
  np.plural = np.determiner == Determiner::kNone || np.determiner == Determiner::kNumber ||
              (np.determiner != Determiner::kA && pick(10) < 3);
  if (pick(10) < 4) np.adjective = pick(AdjectiveCount());
  return np;
}

Clause RandomClause(std::mt19937_64& rng, bool allow_negation, int verb = -1) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  Clause c;
  if (pick(10) < 3) {
    c.pronoun = static_cast<Pronoun>(pick(5));
  } else {
    c.subject = RandomNounPhrase(rng, /*allow_bare=*/true, kPerson | kAnimal);
  }
  c.verb = verb >= 0 ? verb : 1 + pick(VerbCount() - 1);
  if (IsTransitive(c.verb)) {
    c.object = RandomNounPhrase(rng, /*allow_bare=*/true, kVerbs[c.verb].object_kinds);
  } else if (c.verb != 0 && pick(4) == 0) {
    c.with = RandomNounPhrase(rng, /*allow_bare=*/false, kPerson | kAnimal);
  }
  c.negated = allow_negation && pick(4) == 0;
  return c;
}

}  // namespace

std::vector<Translation> GenerateCorpus(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  std::vector<Translation> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    Sentence s;
    const int kind = pick(10);
    if (kind < 2) {  // a question
      s.question = true;
      s.main = RandomClause(rng, /*allow_negation=*/false);
    } else if (kind < 4) {  // ..., weil ...
      s.main = RandomClause(rng, true);
      s.connective = Connective::kBecause;
      s.subordinate = RandomClause(rng, true);
    } else if (kind < 5) {  // ... sagt, dass ...
      s.main = RandomClause(rng, false, /*verb=*/0);
      s.connective = Connective::kThat;
      s.subordinate = RandomClause(rng, true);
    } else {
      s.main = RandomClause(rng, true);
    }
    out.push_back(Render(s));
  }
  return out;
}

}  // namespace gpeserve::train
