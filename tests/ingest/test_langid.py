"""Language identification: all 24 EU languages recognised, non-EU text and mismatches rejected.

The texts are Articles 1 and 3 (Czech: also 4) of the Universal Declaration of Human Rights (copyright-free) in each
language's official translation, one short realistic paragraph per language.
"""

import pytest

from stages.ingest.langid import EU_LANGUAGES, LangIdConfig, LanguageIdentifier, is_eu
from stages.ingest.reasons import LANGID_REASONS

UDHR = {
    "bg": (
        "Всички хора се раждат свободни и равни по достойнство и права. Те са надарени с разум и съвест и "
        "следва да се отнасят помежду си в дух на братство. Всеки човек има право на живот, свобода и "
        "лична сигурност."
    ),
    "cs": (
        "Všichni lidé rodí se svobodní a sobě rovní co do důstojnosti a práv. Jsou nadáni rozumem a "
        "svědomím a mají spolu jednat v duchu bratrství. Každý má právo na život, svobodu a osobní "
        "bezpečnost. Nikdo nesmí být držen v otroctví nebo nevolnictví; otroctví a obchod s otroky jsou "
        "zakázány ve všech svých formách."
    ),
    "da": (
        "Alle mennesker er født frie og lige i værdighed og rettigheder. De er udstyret med fornuft og "
        "samvittighed, og de bør handle mod hverandre i en broderskabets ånd. Enhver har ret til liv, "
        "frihed og personlig sikkerhed."
    ),
    "de": (
        "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und "
        "Gewissen begabt und sollen einander im Geist der Brüderlichkeit begegnen. Jeder hat das Recht "
        "auf Leben, Freiheit und Sicherheit der Person."
    ),
    "el": (
        "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα. Είναι "
        "προικισμένοι με λογική και συνείδηση, και οφείλουν να συμπεριφέρονται μεταξύ τους με πνεύμα "
        "αδελφοσύνης. Κάθε άτομο έχει δικαίωμα στη ζωή, την ελευθερία και την προσωπική του ασφάλεια."
    ),
    "en": (
        "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
        "conscience and should act towards one another in a spirit of brotherhood. Everyone has the right "
        "to life, liberty and security of person."
    ),
    "es": (
        "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de "
        "razón y conciencia, deben comportarse fraternalmente los unos con los otros. Todo individuo "
        "tiene derecho a la vida, a la libertad y a la seguridad de su persona."
    ),
    "et": (
        "Kõik inimesed sünnivad vabadena ja võrdsetena oma väärikuselt ja õigustelt. Neile on antud "
        "mõistus ja südametunnistus ja nende suhtumist üksteisesse peab kandma vendluse vaim. Igaühel on "
        "õigus elule, vabadusele ja isikupuutumatusele."
    ),
    "fi": (
        "Kaikki ihmiset syntyvät vapaina ja tasavertaisina arvoltaan ja oikeuksiltaan. Heille on annettu "
        "järki ja omatunto, ja heidän on toimittava toisiaan kohtaan veljeyden hengessä. Jokaisella on "
        "oikeus elämään, vapauteen ja henkilökohtaiseen turvallisuuteen."
    ),
    "fr": (
        "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de "
        "raison et de conscience et doivent agir les uns envers les autres dans un esprit de fraternité. "
        "Tout individu a droit à la vie, à la liberté et à la sûreté de sa personne."
    ),
    "ga": (
        "Saolaítear gach duine den chine daonna saor agus comhionann i ndínit agus i gcearta. Tá bua an "
        "réasúin agus an choinsiasa acu agus dlíd iad féin d'iompar de mheon bráithreachais i leith a "
        "chéile. Tá ag gach uile dhuine an ceart chun beatha, chun saoirse agus chun slándála a phearsan."
    ),
    "hr": (
        "Sva ljudska bića rađaju se slobodna i jednaka u dostojanstvu i pravima. Ona su obdarena razumom "
        "i sviješću pa jedna prema drugima trebaju postupati u duhu bratstva. Svatko ima pravo na život, "
        "slobodu i osobnu sigurnost."
    ),
    "hu": (
        "Minden emberi lény szabadon születik és egyenlő méltósága és joga van. Az emberek, ésszel és "
        "lelkiismerettel bírván, egymással szemben testvéri szellemben kell hogy viseltessenek. Minden "
        "személynek joga van az élethez, a szabadsághoz és a személyi biztonsághoz."
    ),
    "it": (
        "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti. Essi sono dotati di "
        "ragione e di coscienza e devono agire gli uni verso gli altri in spirito di fratellanza. Ogni "
        "individuo ha diritto alla vita, alla libertà ed alla sicurezza della propria persona."
    ),
    "lt": (
        "Visi žmonės gimsta laisvi ir lygūs savo orumu ir teisėmis. Jiems suteiktas protas ir sąžinė ir "
        "jie turi elgtis vienas kito atžvilgiu kaip broliai. Kiekvienas žmogus turi teisę į gyvybę, "
        "laisvę ir asmens saugumą."
    ),
    "lv": (
        "Visi cilvēki piedzimst brīvi un vienlīdzīgi savā pašcieņā un tiesībās. Viņi ir apveltīti ar "
        "saprātu un sirdsapziņu, un viņiem jāizturas citam pret citu brālības garā. Ikvienam ir tiesības "
        "uz dzīvību, brīvību un personas neaizskaramību."
    ),
    "mt": (
        "Il-bnedmin kollha jitwieldu ħielsa u ugwali fid-dinjità u d-drittijiet. Huma mogħnija bir-raġuni "
        "u bil-kuxjenza u għandhom iġibu ruħhom ma' xulxin bi spirtu ta' aħwa. Kulħadd għandu d-dritt "
        "għall-ħajja, għal-libertà u għas-sigurtà tal-persuna tiegħu."
    ),
    "nl": (
        "Alle mensen worden vrij en gelijk in waardigheid en rechten geboren. Zij zijn begiftigd met "
        "verstand en geweten, en behoren zich jegens elkander in een geest van broederschap te gedragen. "
        "Een ieder heeft het recht op leven, vrijheid en onschendbaarheid van zijn persoon."
    ),
    "pl": (
        "Wszyscy ludzie rodzą się wolni i równi pod względem swej godności i swych praw. Są oni obdarzeni "
        "rozumem i sumieniem i powinni postępować wobec innych w duchu braterstwa. Każdy człowiek ma "
        "prawo do życia, wolności i bezpieczeństwa swej osoby."
    ),
    "pt": (
        "Todos os seres humanos nascem livres e iguais em dignidade e em direitos. Dotados de razão e de "
        "consciência, devem agir uns para com os outros em espírito de fraternidade. Todo o indivíduo tem "
        "direito à vida, à liberdade e à segurança pessoal."
    ),
    "ro": (
        "Toate ființele umane se nasc libere și egale în demnitate și în drepturi. Ele sunt înzestrate cu "
        "rațiune și conștiință și trebuie să se comporte unele față de altele în spiritul fraternității. "
        "Orice ființă umană are dreptul la viață, la libertate și la securitatea persoanei sale."
    ),
    "sk": (
        "Všetci ľudia sa rodia slobodní a sebe rovní, čo sa týka ich dôstojnosti a práv. Sú obdarení "
        "rozumom a svedomím a majú spolu zaobchádzať v duchu bratstva. Každý má právo na život, slobodu a "
        "osobnú bezpečnosť."
    ),
    "sl": (
        "Vsi ljudje se rodijo svobodni in imajo enako dostojanstvo in enake pravice. Obdarjeni so z "
        "razumom in vestjo in bi morali ravnati drug z drugim kakor bratje. Vsakdo ima pravico do "
        "življenja, prostosti in osebne varnosti."
    ),
    "sv": (
        "Alla människor är födda fria och lika i värde och rättigheter. De har utrustats med förnuft och "
        "samvete och bör handla gentemot varandra i en anda av broderskap. Var och en har rätt till liv, "
        "frihet och personlig säkerhet."
    ),
}

NON_EU = {
    "ru": (
        "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и "
        "совестью и должны поступать в отношении друг друга в духе братства. Каждый человек имеет право "
        "на жизнь, на свободу и на личную неприкосновенность."
    ),
    "tr": (
        "Bütün insanlar hür, haysiyet ve haklar bakımından eşit doğarlar. Akıl ve vicdana sahiptirler ve "
        "birbirlerine karşı kardeşlik zihniyeti ile hareket etmelidirler. Yaşamak, hürriyet ve kişi "
        "emniyeti her ferdin hakkıdır."
    ),
    "no": (
        "Alle mennesker er født frie og med samme menneskeverd og menneskerettigheter. De er utstyrt med "
        "fornuft og samvittighet og bør handle mot hverandre i brorskapets ånd. Enhver har rett til liv, "
        "frihet og personlig sikkerhet."
    ),
}


@pytest.fixture(scope="module")
def ident():
    return LanguageIdentifier(LangIdConfig())


def test_fixture_covers_all_languages():
    assert sorted(UDHR) == sorted(EU_LANGUAGES) and len(EU_LANGUAGES) == 24
    assert all(len(text) >= 200 for text in UDHR.values())


@pytest.mark.parametrize("lang", EU_LANGUAGES)
def test_each_eu_language_identified_and_kept(ident, lang):
    code, score = ident.identify(UDHR[lang])
    assert code == lang
    assert 0.9 <= score <= 1.0
    assert ident.decide(lang, UDHR[lang]) == (lang, score, None)


@pytest.mark.parametrize("lang", sorted(NON_EU))
def test_non_eu_language_rejected(ident, lang):
    code, score = ident.identify(NON_EU[lang])
    assert code == lang  # Norwegian stays Norwegian, it is not mapped to Danish
    assert not is_eu(code)
    assert ident.decide("da", NON_EU[lang])[2] == "lang_not_eu"


def test_mismatch_detected_and_can_be_allowed(ident):
    assert ident.decide("de", UDHR["en"]) == ("en", ident.identify(UDHR["en"])[1], "lang_mismatch")
    lenient = LanguageIdentifier(LangIdConfig(reject_mismatch=False))
    assert lenient.decide("de", UDHR["en"])[2] is None


def test_low_score_global_and_per_language():
    mixed = UDHR["de"] + " " + UDHR["en"] + " " + UDHR["fr"]  # about a third of each
    code, score = LanguageIdentifier().identify(mixed)
    assert code in ("de", "en", "fr") and score < 0.5
    assert LanguageIdentifier().decide(code, mixed)[2] == "lang_low_score"
    strict_en = LanguageIdentifier(LangIdConfig(min_score_per_language={"en": 1.0}))
    assert strict_en.decide("en", UDHR["en"])[2] == "lang_low_score"
    assert strict_en.decide("de", UDHR["de"])[2] is None


def test_croatian_variants_mapped_but_cyrillic_serbian_is_not():
    assert LanguageIdentifier._map("bs", UDHR["hr"]) == "hr"
    assert LanguageIdentifier._map("sr", UDHR["hr"]) == "hr"
    serbian_cyrillic = (
        "Сва људска бића рађају се слободна и једнака у достојанству и правима. Она су обдарена разумом и "
        "свешћу и треба једни према другима да поступају у духу братства."
    )
    code, _ = LanguageIdentifier().identify(serbian_cyrillic)
    assert code == "sr" and not is_eu(code)


def test_invalid_characters_are_cleaned_not_fatal(ident):
    dirty = "\x00\x01" + UDHR["pl"][:120] + "\ud800\ufffe\x85" + UDHR["pl"][120:] + "\U0001ffff"
    assert ident.identify(dirty)[0] == "pl"


def test_nothing_to_identify(ident):
    assert ident.identify("") == ("und", 0.0)
    assert ident.identify("12345 67 89 -- !!") == ("und", 0.0)
    assert ident.decide("en", "")[2] == "lang_not_eu"
    assert set(LANGID_REASONS) == {"lang_not_eu", "lang_low_score", "lang_mismatch"}


def test_config_validation():
    with pytest.raises(ValueError):
        LangIdConfig(min_score=1.5)
    with pytest.raises(ValueError):
        LangIdConfig(min_score_per_language={"no": 0.5})
    with pytest.raises(ValueError):
        LangIdConfig(min_score_per_language={"de": -0.1})
    with pytest.raises(ValueError):
        LangIdConfig(minscore=0.5)
