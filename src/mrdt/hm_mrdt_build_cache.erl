%% @doc The distributed build cache of "Banyan: Coordination-free Distributed Transactions
%% over Mergeable Types", section 2 (Fig. 1 and the merge function of section 2.1), as a
%% mergeable type. A value is a build artefact `{artefact, Binary}' or its statistics
%% `{stats, Created, LastAccessed, Hits}'.
%%
%% Builds are reproducible, so two versions of an artefact are equal; different ones conflict
%% (`{conflict, {different_artefacts, A, B}}'). Statistics merge to the earliest creation
%% time, the latest access time, and the hits of both versions since the LCA (`H1 + H2 - H0',
%% or `H1 + H2' without an LCA). Keys are paths such as
%% `[<<"lwt">>, <<"5.3.0">>, stats, <<"lwt_mutex.cmx">>]'.
-module(hm_mrdt_build_cache).
-behaviour(hm_mrdt).

-export([merge/3, valid/1, hit/2]).
-export_type([value/0]).

-type value() :: {artefact, binary()} | {stats, number(), number(), non_neg_integer()}.

%% @doc The merge of section 2.1.
-spec merge(value() | none, value(), value()) -> hm_mrdt:result().
merge(_, {artefact, A}, {artefact, A}) -> {ok, {artefact, A}};
merge(_, {artefact, A}, {artefact, B}) -> {conflict, {different_artefacts, A, B}};
merge(L, {stats, C1, A1, H1}, {stats, C2, A2, H2}) ->
    H0 = case L of
             {stats, _, _, H} -> H;
             _ -> 0
         end,
    {ok, {stats, min(C1, C2), max(A1, A2), H1 + H2 - H0}};
merge(_, A, B) -> {conflict, {kind_mismatch, A, B}}.

%% @doc The statistics after one more hit at `Time'.
-spec hit({stats, number(), number(), non_neg_integer()}, number()) ->
          {stats, number(), number(), non_neg_integer()}.
hit({stats, C, _, H}, Time) -> {stats, C, Time, H + 1}.

%% @doc An artefact or statistics.
-spec valid(term()) -> boolean().
valid({artefact, B}) -> is_binary(B);
valid({stats, C, A, H}) -> is_number(C) andalso is_number(A) andalso is_integer(H) andalso H >= 0;
valid(_) -> false.
