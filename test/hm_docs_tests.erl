%% @doc The EEP-48 doc chunks that Erlang's `h/1,2' and Elixir's `h' read: every module of
%% the application has a module doc, and every function the `hypermnesia' facade exports
%% has a doc that the shell renders. The chunks are built by every compile (a rebar3
%% provider hook running edoc); when they are absent (a build without the hook), the test
%% builds each module's chunk itself with edoc's chunk doclet, so it always checks something.
-module(hm_docs_tests).
-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/eep48.hrl").

facade_functions_documented_test() ->
    #docs_v1{module_doc = ModDoc, docs = Entries} = docs(hypermnesia),
    ?assertMatch(#{<<"en">> := [_ | _]}, ModDoc),
    Exported = [FA || {F, _} = FA <- hypermnesia:module_info(exports), F =/= module_info],
    Undocumented = [FA || {F, A} = FA <- Exported,
                          not is_documented(lists:keyfind({function, F, A}, 1, Entries))],
    ?assertEqual([], Undocumented).

%% What `h(hypermnesia, async_ec)' prints: the rendered doc names the context and Mnesia's.
shell_renders_async_ec_test() ->
    %% The renderer asks its group leader for io options; EUnit's does not answer them.
    GL = group_leader(),
    group_leader(whereis(user), self()),
    Rendered = try shell_docs:render(hypermnesia, async_ec, docs(hypermnesia),
                                     #{encoding => unicode, columns => 100, ansi => false})
               after group_leader(GL, self())
               end,
    Text = unicode:characters_to_binary(Rendered),
    ?assertMatch({_, _}, binary:match(Text, <<"-spec async_ec(Fun">>)),
    ?assertMatch({_, _}, binary:match(Text, <<"mnesia:async_dirty/1">>)).

every_module_has_a_module_doc_test_() ->
    {timeout, 120,
     fun() ->
             _ = application:load(hypermnesia),
             {ok, Mods} = application:get_key(hypermnesia, modules),
             Missing = [M || M <- Mods, not has_module_doc(docs(M))],
             ?assertEqual([], Missing)
     end}.

has_module_doc(#docs_v1{module_doc = #{<<"en">> := [_ | _]}}) -> true;
has_module_doc(_) -> false.

is_documented({_, _, _, #{<<"en">> := [_ | _]}, _}) -> true;
is_documented(_) -> false.

%% The module's chunk as code:get_doc/1 finds it (next to the application's ebin, or further
%% up), or one edoc builds now into a temporary directory.
docs(Mod) ->
    case code:get_doc(Mod) of
        {ok, #docs_v1{format = <<"application/erlang+html">>} = D} -> D;
        _ -> build_chunk(Mod)
    end.

build_chunk(Mod) ->
    Src = proplists:get_value(source, Mod:module_info(compile)),
    Dir = filename:join(["/tmp", "hm_docs_" ++ os:getpid()]),
    ok = edoc:files([Src], [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks},
                            {preprocess, true}, {dir, Dir}]),
    {ok, Bin} = file:read_file(filename:join([Dir, "chunks", atom_to_list(Mod) ++ ".chunk"])),
    binary_to_term(Bin).

%% The status page's example in the operations guide works when pasted: its token goes into
%% a URL as it is (no character to escape), the page accepts it there, and the guide's curl
%% lines carry it in URLs without spaces.
guide_status_page_example_test() ->
    Guide = guide("05-operations.md"),
    {match, [Token]} = re:run(Guide, "token => <<\"([^\"]*)\">>",
                              [{capture, all_but_first, list}]),
    ?assertMatch({match, _}, re:run(Token, "^[A-Za-z0-9._~-]+$")),
    ?assert(hm_http:authorized({"/status?token=" ++ Token, []}, list_to_binary(Token))),
    {match, Curls} = re:run(Guide, "^\\$ curl .*$",
                            [multiline, global, {capture, first, list}]),
    ?assertNotEqual([], [L || [L] <- Curls, string:find(L, Token) =/= nomatch]),
    [?assertMatch({match, _}, re:run(L, "'http://[^' ]+'")) || [L] <- Curls].

guide(Name) ->
    Src = proplists:get_value(source, ?MODULE:module_info(compile)),
    Root = filename:dirname(filename:dirname(Src)),
    {ok, Text} = file:read_file(filename:join([Root, "docs", "guide", Name])),
    binary_to_list(Text).
